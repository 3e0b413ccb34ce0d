"""Agent framework integrations, each an optional extra on the journal's public API.

- ``cas_journal.integrations.openai_agents``: an OpenAI Agents SDK ``Session``
  (``pip install 'cas-journal[openai-agents]'``);
- ``cas_journal.integrations.claude_agent_sdk``: a Claude Agent SDK ``SessionStore``
  (``pip install 'cas-journal[claude-agent-sdk]'``).

Importing this package imports no SDK; each module imports its own.
"""
