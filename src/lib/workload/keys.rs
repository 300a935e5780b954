//! Key names as YCSB's `CoreWorkload.buildKeyName` builds them.
//!
//! `"user"` + the decimal key number, where the key number is first replaced by
//! [`fnvhash64`] of itself unless `insertorder=ordered`,
//! and left-padded with zeros to `zeropadding` digits.

use super::generator::fnvhash64;

/// YCSB's `insertorder`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum InsertOrder {
    /// Key numbers are hashed (YCSB's default): keys are scattered in sort order.
    Hashed,
    /// Key numbers are used as they are: keys sort in insert order (with enough
    /// `zeropadding`).
    Ordered,
}

/// Builds key names from key numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyNamer {
    /// Hashed or ordered.
    pub order: InsertOrder,
    /// Minimum number of digits (YCSB `zeropadding`, default 1).
    pub zero_padding: usize,
}

/// The prefix of every key, as in YCSB.
pub const KEY_PREFIX: &str = "user";

impl KeyNamer {
    /// A namer with YCSB's settings.
    pub fn new(order: InsertOrder, zero_padding: usize) -> KeyNamer {
        KeyNamer { order, zero_padding }
    }

    /// The number that is printed for `keynum` (its FNV hash when hashed).
    pub fn printed_number(&self, keynum: u64) -> i64 {
        match self.order {
            InsertOrder::Hashed => fnvhash64(keynum as i64),
            InsertOrder::Ordered => keynum as i64,
        }
    }

    /// The key name of `keynum`.
    pub fn name(&self, keynum: u64) -> String {
        let mut s = String::with_capacity(KEY_PREFIX.len() + 20);
        self.write_name(keynum, &mut s);
        s
    }

    /// Appends the key name of `keynum` to `out`.
    pub fn write_name(&self, keynum: u64, out: &mut String) {
        // Java's Long.toString(n) by `itoa`: a client thread names a key for every
        // operation, and `write!` (the formatting machinery) was 1% of a 16-thread shm
        // run's CPU.
        let mut digits = itoa::Buffer::new();
        let printed = digits.format(self.printed_number(keynum));
        out.push_str(KEY_PREFIX);
        // Java pads Long.toString(n), including any minus sign, with leading zeros.
        for _ in printed.len()..self.zero_padding {
            out.push('0');
        }
        out.push_str(printed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_names_match_ycsb() {
        // From Java: buildKeyName(k) with insertorder=hashed/zeropadding=1,
        // ordered/zeropadding=8 and ordered/zeropadding=1.
        let hashed = KeyNamer::new(InsertOrder::Hashed, 1);
        let ordered8 = KeyNamer::new(InsertOrder::Ordered, 8);
        let ordered1 = KeyNamer::new(InsertOrder::Ordered, 1);
        let cases = [
            (0u64, "user6284781860667377211", "user00000000", "user0"),
            (1, "user8517097267634966620", "user00000001", "user1"),
            (42, "user55488592825689361", "user00000042", "user42"),
            (999, "user2071219101098386137", "user00000999", "user999"),
        ];
        for (k, h, o8, o1) in cases {
            assert_eq!(hashed.name(k), h);
            assert_eq!(ordered8.name(k), o8);
            assert_eq!(ordered1.name(k), o1);
        }
        // Padding wider than a hashed number pads it too.
        assert_eq!(KeyNamer::new(InsertOrder::Hashed, 20).name(42), "user00055488592825689361");
        // A negative number (a key number past i64::MAX, printed as Java's long) keeps
        // its sign after the zeros, as Java's padding of Long.toString does.
        assert_eq!(KeyNamer::new(InsertOrder::Ordered, 4).name(u64::MAX), "user00-1");
        assert_eq!(KeyNamer::new(InsertOrder::Ordered, 1).name(1 << 63), "user-9223372036854775808");
        assert_eq!(KeyNamer::new(InsertOrder::Ordered, 1).name(i64::MAX as u64), "user9223372036854775807");
    }
}
