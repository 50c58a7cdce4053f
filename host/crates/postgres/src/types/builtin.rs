//! The rendering of Postgres's built-in types, by OID, without a catalog
//! query. Built-in type OIDs are fixed across versions; any OID not listed
//! here (user types, and built-ins newer than Postgres 15) is resolved from
//! the catalog by `type_catalog.rs`.

use std::sync::Arc;

use super::{ArrayType, TypeKind};

/// Built-in base, range and multirange types that `to_jsonb()` renders as
/// their output text.
const TEXT_TYPES: &[u32] = &[
    17,   // bytea
    18,   // "char"
    19,   // name
    24,   // regproc
    25,   // text
    26,   // oid
    27,   // tid
    28,   // xid
    29,   // cid
    142,  // xml
    194,  // pg_node_tree
    600,  // point
    601,  // lseg
    602,  // path
    603,  // box
    604,  // polygon
    628,  // line
    650,  // cidr
    718,  // circle
    774,  // macaddr8
    790,  // money
    829,  // macaddr
    869,  // inet
    1033, // aclitem
    1042, // bpchar
    1043, // varchar
    1082, // date: the ISO text is what to_jsonb() prints
    1083, // time
    1186, // interval
    1266, // timetz
    1560, // bit
    1562, // varbit
    1790, // refcursor
    2202, // regprocedure
    2203, // regoper
    2204, // regoperator
    2205, // regclass
    2206, // regtype
    2950, // uuid
    2970, // txid_snapshot
    3220, // pg_lsn
    3361, // pg_ndistinct
    3402, // pg_dependencies
    3614, // tsvector
    3615, // tsquery
    3642, // gtsvector
    3734, // regconfig
    3769, // regdictionary
    3904, // int4range
    3906, // numrange
    3908, // tsrange
    3910, // tstzrange
    3912, // daterange
    3926, // int8range
    4072, // jsonpath
    4089, // regnamespace
    4096, // regrole
    4191, // regcollation
    4451, // int4multirange
    4532, // nummultirange
    4533, // tsmultirange
    4534, // tstzmultirange
    4535, // datemultirange
    4536, // int8multirange
    4600, // pg_brin_bloom_summary
    4601, // pg_brin_minmax_multi_summary
    5017, // pg_mcv_list
    5038, // pg_snapshot
    5069, // xid8
];

/// Built-in array types and their element types (`pg_type.typelem`).
const ARRAY_TYPES: &[(u32, u32)] = &[
    (143, 142),
    (199, 114),
    (271, 5069),
    (629, 628),
    (651, 650),
    (719, 718),
    (775, 774),
    (791, 790),
    (1000, 16),
    (1001, 17),
    (1002, 18),
    (1003, 19),
    (1005, 21),
    (1006, 22),
    (1007, 23),
    (1008, 24),
    (1009, 25),
    (1010, 27),
    (1011, 28),
    (1012, 29),
    (1013, 30),
    (1014, 1042),
    (1015, 1043),
    (1016, 20),
    (1017, 600),
    (1018, 601),
    (1019, 602),
    (1020, 603),
    (1021, 700),
    (1022, 701),
    (1027, 604),
    (1028, 26),
    (1034, 1033),
    (1040, 829),
    (1041, 869),
    (1115, 1114),
    (1182, 1082),
    (1183, 1083),
    (1185, 1184),
    (1187, 1186),
    (1231, 1700),
    (1270, 1266),
    (1561, 1560),
    (1563, 1562),
    (2201, 1790),
    (2207, 2202),
    (2208, 2203),
    (2209, 2204),
    (2210, 2205),
    (2211, 2206),
    (2949, 2970),
    (2951, 2950),
    (3221, 3220),
    (3643, 3614),
    (3644, 3642),
    (3645, 3615),
    (3735, 3734),
    (3770, 3769),
    (3807, 3802),
    (3905, 3904),
    (3907, 3906),
    (3909, 3908),
    (3911, 3910),
    (3913, 3912),
    (3927, 3926),
    (4073, 4072),
    (4090, 4089),
    (4097, 4096),
    (4192, 4191),
    (5039, 5038),
    (6150, 4451),
    (6151, 4532),
    (6152, 4533),
    (6153, 4534),
    (6155, 4535),
    (6157, 4536),
];

/// `box`, whose array syntax separates elements with `;`.
const BOX: u32 = 603;

/// The rendering of a built-in type, or `None` when `oid` is not one weft
/// knows (then the catalog decides).
pub fn builtin_kind(oid: u32) -> Option<TypeKind> {
    if let Some(kind) = scalar_kind(oid) {
        return Some(kind);
    }
    let &(_, element) = ARRAY_TYPES.iter().find(|(array, _)| *array == oid)?;
    Some(TypeKind::Array(Arc::new(ArrayType {
        element: scalar_kind(element)?,
        delimiter: if element == BOX { ';' } else { ',' },
    })))
}

fn scalar_kind(oid: u32) -> Option<TypeKind> {
    Some(match oid {
        16 => TypeKind::Bool,
        20 | 21 | 23 | 700 | 701 | 1700 => TypeKind::Number,
        114 | 3802 => TypeKind::Json,
        1114 => TypeKind::Timestamp,
        1184 => TypeKind::Timestamptz,
        22 => TypeKind::Vector(Arc::new(TypeKind::Number)), // int2vector
        30 => TypeKind::Vector(Arc::new(TypeKind::Text)),   // oidvector
        _ if TEXT_TYPES.contains(&oid) => TypeKind::Text,
        _ => return None,
    })
}
