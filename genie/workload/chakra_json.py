"""Read Chakra's JSON form of an execution trace: what Chakra's ``chakra_jsonizer`` writes.

The jsonizer writes protobuf's JSON mapping of each message, one after another with nothing
between them: first the ``GlobalMetadata``, then one object per ``Node``. In that mapping field
names are lowerCamelCase (``dataDeps``, ``durationMicros``, ``int64Val``; the original snake_case
names are accepted too), 64-bit integers are strings (``"id": "12"``), enums are names
(``"COMM_COLL_NODE"``) or numbers, bytes are base64, doubles may be ``"NaN"``/``"Infinity"``, and
fields at their default value are left out (a node with id 0 has no ``"id"``). Files are
``<prefix>.<rank>.json`` (or ``.json.gz``) and load by the same prefix rules as ``.et`` files
(``genie.workload.loader``). The result is the same model a ``.et`` gives, attr kinds included,
so both load, validate and simulate alike; tests cross-check this reader against protobuf's
``json_format``. A file holding one object with a ``workload_graph`` list is the other form
Chakra has, the one its C++ JSON feeder reads (``genie.workload.feeder_json``); any other shape
is refused in one line naming the forms genie reads. The decoder is
``genie.workload.chakra_json_reader``, loaded on the first JSON trace.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from genie.workload.model import Metadata, Node


def decode_chakra_json(
    data: bytes, source: str = "<json>"
) -> tuple[Metadata, list[Node], list[str]]:
    """Decode a jsonizer file: metadata, nodes, and problems noticed."""
    # the decoder (and the feeder form's reader) load here: ``.et`` traces need neither
    from genie.workload.chakra_json_reader import decode_chakra_json as decode

    return decode(data, source)
