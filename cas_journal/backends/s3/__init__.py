"""S3-compatible backend (AWS S3, MinIO, R2, ...): ``S3Store.from_url("s3://bucket/prefix")``.

Needs the ``s3`` extra (boto3), but only to open a store: importing this package does not
import boto3. The server must honour conditional writes (``If-None-Match: *`` and
``If-Match`` on PutObject); opening a store checks that it does.

Design in brief (details in each module):

* objects: packs (the local store's pack format) listed by a manifest that every writer
  changes with conditional writes, plus loose keys ``objects/<oid[:2]>/<oid[2:]>`` for
  small writes, uploaded in waves that never store an object before the objects it
  references (objects.py, packset.py, manifest.py); reads through cached pack indexes
  and growing ranged GETs (ranges.py);
* pack, gc and fsck on a bucket (copies.py): gc deletes in two phases, through
  condemned packs, so it is safe while other clients write; one maintenance run at a
  time holds a lease (lease.py); the rule is in ``backends.condemned`` and
  ``docs/format.md``;
* refs: one key per ref; compare-and-swap = read value and ETag, then PutObject with
  ``If-Match`` (``If-None-Match: *`` to create); delete = a conditional *tombstone* write,
  not a conditional DELETE, which many servers ignore (refs.py);
* reflog: one small object per update, written before the ref and removed if the swap
  loses; small entries are readable from the listing alone (reflog.py);
* names: an order-preserving key encoding, so listings come back in name order; names
  too long for a key live under their hash with the real name in the body (keys.py);
* client.py: boto3 client, retries (standard mode) and error mapping; store.py: S3Store,
  the FORMAT key and the conditional-write check.
"""

from .objects import S3ObjectStore
from .refs import S3RefStore
from .store import S3Store

__all__ = ["S3ObjectStore", "S3RefStore", "S3Store"]
