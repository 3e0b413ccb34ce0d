"""Provider-ready context: ``build_context`` results in each API's own request format.

```python
from cas_journal.providers import to_anthropic, to_openai_chat, to_openai_responses

messages = cj.build_context(j.path("t1"))
client.chat.completions.create(model=..., messages=to_openai_chat(messages))
client.responses.create(model=..., input=to_openai_responses(messages))
client.messages.create(model=..., max_tokens=1024, **to_anthropic(messages))
```

Each converter pairs tool calls with their results the way its API requires and puts
system messages where the API takes them (see each module). Nothing here imports an SDK:
the results are plain dicts, typed with the SDKs' own TypedDicts for type checkers.
"""

from .anthropic_messages import AnthropicRequest, to_anthropic
from .openai_chat import to_openai_chat
from .openai_responses import to_openai_responses
from .turns import Call, ProviderFormatError, Turn, to_turns

__all__ = [
    "AnthropicRequest",
    "Call",
    "ProviderFormatError",
    "Turn",
    "to_anthropic",
    "to_openai_chat",
    "to_openai_responses",
    "to_turns",
]
