"""The MLCommons Chakra execution-trace schema, built as protobuf message classes at import.

Chakra's ``schema/protobuf/et_def.proto`` (package ``ChakraProtoMsg``) is the published
format ASTRA-sim reads; its field numbers are what makes a file interoperable, so they are
written out here from that schema rather than generated at build time: :data:`MESSAGES`
lists each message's fields as ``(name, number, type, label)``, :func:`_file` turns the
table into a ``FileDescriptorProto`` and ``message_factory`` makes the classes. The enums are
those of Chakra's merged ``et_def.proto`` (astra-sim/chakra @bf222b2): ``NodeType`` ends at
``COMM_COLL_NODE`` — the storage, batch and checkpoint node types of an unmerged proposal
are not part of it, and a node of another type is refused by name and number on import.
Everything Chakra has no field for is written as ``clustersim.*`` attributes
(:mod:`.chakra_attrs`).
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "ChakraProtoMsg"
_F = descriptor_pb2.FieldDescriptorProto

#: the ``AttributeProto.value`` oneof: (kind, number, scalar type) — its ``<kind>_val`` field
#: holds one value, ``<kind>_list`` (number + 1) a ``<Kind>List`` message of them
ATTRIBUTE_KINDS = (
    ("double", 3, _F.TYPE_DOUBLE),
    ("float", 5, _F.TYPE_FLOAT),
    ("int32", 7, _F.TYPE_INT32),
    ("int64", 9, _F.TYPE_INT64),
    ("uint32", 11, _F.TYPE_UINT32),
    ("uint64", 13, _F.TYPE_UINT64),
    ("sint32", 15, _F.TYPE_SINT32),
    ("sint64", 17, _F.TYPE_SINT64),
    ("fixed32", 19, _F.TYPE_FIXED32),
    ("fixed64", 21, _F.TYPE_FIXED64),
    ("sfixed32", 23, _F.TYPE_SFIXED32),
    ("sfixed64", 25, _F.TYPE_SFIXED64),
    ("bool", 27, _F.TYPE_BOOL),
    ("string", 29, _F.TYPE_STRING),
    ("bytes", 31, _F.TYPE_BYTES),
)

#: ``NodeType`` (et_def.proto)
NODE_TYPES = {
    "INVALID_NODE": 0,
    "METADATA_NODE": 1,
    "MEM_LOAD_NODE": 2,
    "MEM_STORE_NODE": 3,
    "COMP_NODE": 4,
    "COMM_SEND_NODE": 5,
    "COMM_RECV_NODE": 6,
    "COMM_COLL_NODE": 7,
}
#: ``CollectiveCommType`` (et_def.proto)
COLLECTIVE_TYPES = {
    "ALL_REDUCE": 0,
    "REDUCE": 1,
    "ALL_GATHER": 2,
    "GATHER": 3,
    "SCATTER": 4,
    "BROADCAST": 5,
    "ALL_TO_ALL": 6,
    "REDUCE_SCATTER": 7,
    "REDUCE_SCATTER_BLOCK": 8,
    "BARRIER": 9,
}

_ONE, _MANY = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
#: message → fields (name, number, type or message name, label)
MESSAGES: dict[str, list[tuple[str, int, int | str, int]]] = {
    "AttributeProto": [("name", 1, _F.TYPE_STRING, _ONE), ("doc_string", 2, _F.TYPE_STRING, _ONE)]
    + [
        field
        for kind, number, scalar in ATTRIBUTE_KINDS
        for field in (
            (f"{kind}_val", number, scalar, _ONE),
            (f"{kind}_list", number + 1, f"{kind.capitalize()}List", _ONE),
        )
    ],
    **{f"{kind.capitalize()}List": [("values", 1, scalar, _MANY)] for kind, _, scalar in ATTRIBUTE_KINDS},
    "GlobalMetadata": [("version", 1, _F.TYPE_STRING, _ONE), ("attr", 2, "AttributeProto", _MANY)],
    "IOInfo": [
        ("values", 1, _F.TYPE_STRING, _ONE),
        ("shapes", 2, _F.TYPE_STRING, _ONE),
        ("types", 3, _F.TYPE_STRING, _ONE),
    ],
    "Node": [
        ("id", 1, _F.TYPE_UINT64, _ONE),
        ("name", 2, _F.TYPE_STRING, _ONE),
        ("type", 3, "NodeType", _ONE),
        ("ctrl_deps", 4, _F.TYPE_UINT64, _MANY),
        ("data_deps", 5, _F.TYPE_UINT64, _MANY),
        ("start_time_micros", 6, _F.TYPE_UINT64, _ONE),
        ("duration_micros", 7, _F.TYPE_UINT64, _ONE),
        ("inputs", 8, "IOInfo", _ONE),
        ("outputs", 9, "IOInfo", _ONE),
        ("attr", 10, "AttributeProto", _MANY),
    ],
}
_ENUMS = {"NodeType": NODE_TYPES, "CollectiveCommType": COLLECTIVE_TYPES}


def _file() -> descriptor_pb2.FileDescriptorProto:
    """``et_def.proto`` (the declared part) as a FileDescriptorProto."""
    fd = descriptor_pb2.FileDescriptorProto(name="clustersim_et_def.proto", package=PACKAGE, syntax="proto3")
    for name, values in _ENUMS.items():
        enum = fd.enum_type.add(name=name)
        for value_name, number in values.items():
            enum.value.add(name=value_name, number=number)
    for name, fields in MESSAGES.items():
        msg = fd.message_type.add(name=name)
        if name == "AttributeProto":
            msg.oneof_decl.add(name="value")
        for field_name, number, typ, label in fields:
            f = msg.field.add(name=field_name, number=number, label=label)
            if isinstance(typ, str):
                f.type = _F.TYPE_ENUM if typ in _ENUMS else _F.TYPE_MESSAGE
                f.type_name = f".{PACKAGE}.{typ}"
            else:
                f.type = typ
            if name == "AttributeProto" and number >= 3:
                f.oneof_index = 0
    return fd


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file())


def message_class(name: str):
    """The protobuf message class of Chakra message ``name`` (``Node``, ``GlobalMetadata`` …)."""
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{PACKAGE}.{name}"))


Node = message_class("Node")
GlobalMetadata = message_class("GlobalMetadata")
AttributeProto = message_class("AttributeProto")


def _node_list() -> descriptor_pb2.FileDescriptorProto:
    """A message of field 1 ``repeated Node`` — clustersim's, never written: an ET file's
    nodes, each length prefix preceded by field 1's tag, are its encoding, so one parse
    reads them all (:func:`.chakra_file.read_trace`)."""
    fd = descriptor_pb2.FileDescriptorProto(
        name="clustersim_node_list.proto", package="clustersim", syntax="proto3"
    )
    fd.dependency.append("clustersim_et_def.proto")
    msg = fd.message_type.add(name="NodeList")
    msg.field.add(
        name="node", number=1, label=_F.LABEL_REPEATED, type=_F.TYPE_MESSAGE, type_name=f".{PACKAGE}.Node"
    )
    return fd


_POOL.Add(_node_list())
#: :func:`_node_list`'s message class
NodeList = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("clustersim.NodeList"))


def _node_view_list() -> descriptor_pb2.FileDescriptorProto:
    """:func:`_node_list` with each node read as a ``NodeView`` — clustersim's, never written:
    Node's fields, but ``attr`` as ``repeated bytes``, each attribute's encoding left unparsed
    (the same bytes on the wire: a length-delimited field 10), so that an import reads each
    distinct attribute list once (:func:`.chakra_file.read_view`)."""
    fd = descriptor_pb2.FileDescriptorProto(
        name="clustersim_node_view.proto", package="clustersim", syntax="proto3"
    )
    fd.dependency.append("clustersim_et_def.proto")
    view = fd.message_type.add()
    view.CopyFrom(next(m for m in _file().message_type if m.name == "Node"))
    view.name = "NodeView"
    attr = next(f for f in view.field if f.name == "attr")
    attr.type = _F.TYPE_BYTES
    attr.ClearField("type_name")
    msg = fd.message_type.add(name="NodeViewList")
    msg.field.add(
        name="node", number=1, label=_F.LABEL_REPEATED, type=_F.TYPE_MESSAGE, type_name=".clustersim.NodeView"
    )
    return fd


_POOL.Add(_node_view_list())
#: :func:`_node_view_list`'s message class
NodeViewList = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("clustersim.NodeViewList"))
