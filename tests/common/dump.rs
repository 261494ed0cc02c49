//! DUMP payloads taken apart and put back together: what the RESTORE
//! tests feed the module's decoder.

/// Redis's CRC-64 (Jones polynomial, reflected, init 0, no final xor), as
/// `crc64.c` computes it over a DUMP payload.
pub fn crc64(data: &[u8]) -> u64 {
    const POLY: u64 = 0xad93_d235_94c9_35a9_u64.reverse_bits();
    let mut crc = 0u64;
    for &byte in data {
        crc ^= u64::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ POLY } else { crc >> 1 };
        }
    }
    crc
}

/// A DUMP payload split into the serialized value and its RDB version.
pub struct Dump {
    pub body: Vec<u8>,
    version: [u8; 2],
}

impl Dump {
    pub fn parse(payload: &[u8]) -> Dump {
        assert!(payload.len() > 10, "a DUMP payload: {payload:?}");
        let (rest, crc) = payload.split_at(payload.len() - 8);
        let crc = u64::from_le_bytes(crc.try_into().expect("8 bytes"));
        assert_eq!(crc64(rest), crc, "the test's CRC-64 matches Redis's");
        let (body, version) = rest.split_at(rest.len() - 2);
        Dump { body: body.to_vec(), version: [version[0], version[1]] }
    }

    /// A payload for `body` that passes RESTORE's checksum.
    pub fn seal(&self, body: &[u8]) -> Vec<u8> {
        let mut out = body.to_vec();
        out.extend_from_slice(&self.version);
        let crc = crc64(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }
}

/// RDB length encoding (what `RedisModule_SaveUnsigned` writes).
pub fn write_len(out: &mut Vec<u8>, n: u64) {
    if n < 1 << 6 {
        out.push(n as u8);
    } else if n < 1 << 14 {
        out.push(0x40 | (n >> 8) as u8);
        out.push(n as u8);
    } else if n <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

pub fn read_len(bytes: &[u8], pos: &mut usize) -> u64 {
    let first = bytes[*pos];
    *pos += 1;
    match first >> 6 {
        0 => u64::from(first & 0x3f),
        1 => {
            let n = u64::from(first & 0x3f) << 8 | u64::from(bytes[*pos]);
            *pos += 1;
            n
        }
        _ if first == 0x80 => {
            let n = u32::from_be_bytes(bytes[*pos..*pos + 4].try_into().expect("4 bytes"));
            *pos += 4;
            u64::from(n)
        }
        _ if first == 0x81 => {
            let n = u64::from_be_bytes(bytes[*pos..*pos + 8].try_into().expect("8 bytes"));
            *pos += 8;
            n
        }
        _ => panic!("unexpected length byte {first:#x}"),
    }
}

/// A module value: `RDB_TYPE_MODULE_2`, the module type id, then
/// (`RDB_MODULE_OPCODE_UINT`, word)... and `RDB_MODULE_OPCODE_EOF`.
pub struct ModuleValue {
    pub head: Vec<u8>,
    pub words: Vec<u64>,
}

impl ModuleValue {
    pub fn parse(body: &[u8]) -> ModuleValue {
        assert_eq!(body[0], 7, "RDB_TYPE_MODULE_2");
        let mut pos = 1;
        read_len(body, &mut pos); // module type id and encoding version
        let head = body[..pos].to_vec();
        let mut words = Vec::new();
        loop {
            match read_len(body, &mut pos) {
                0 => break,
                2 => words.push(read_len(body, &mut pos)),
                op => panic!("unexpected module opcode {op}"),
            }
        }
        assert_eq!(pos, body.len(), "the value ends at EOF");
        ModuleValue { head, words }
    }

    pub fn encode(&self, words: &[u64], eof: bool) -> Vec<u8> {
        let mut out = self.head.clone();
        for &w in words {
            out.push(2);
            write_len(&mut out, w);
        }
        if eof {
            out.push(0);
        }
        out
    }
}
