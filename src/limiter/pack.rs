//! Fields of known widths packed into 64-bit words, low bits first: how the
//! compact states keep bounded numbers (times below 2^54 µs, counts up to
//! 10^15 < 2^50) without padding them to whole words.

/// Writes fields into `N` words.
pub(crate) struct Packer<const N: usize> {
    words: [u64; N],
    at: u32,
}

impl<const N: usize> Packer<N> {
    pub(crate) fn new() -> Self {
        Packer { words: [0; N], at: 0 }
    }

    /// Appends the low `width` bits of `value` (the caller keeps values
    /// within their width; higher bits are dropped).
    pub(crate) fn put(mut self, value: u64, width: u32) -> Self {
        let value = if width == 64 { value } else { value & ((1 << width) - 1) };
        let (word, shift) = ((self.at / 64) as usize, self.at % 64);
        if let Some(w) = self.words.get_mut(word) {
            *w |= value << shift;
        }
        if shift + width > 64 {
            if let Some(w) = self.words.get_mut(word + 1) {
                *w |= value >> (64 - shift);
            }
        }
        self.at += width;
        self
    }

    pub(crate) fn finish(self) -> [u64; N] {
        self.words
    }
}

/// Reads fields back in the order they were put.
pub(crate) struct Unpacker<'a> {
    words: &'a [u64],
    at: u32,
}

impl<'a> Unpacker<'a> {
    pub(crate) fn new(words: &'a [u64]) -> Self {
        Unpacker { words, at: 0 }
    }

    pub(crate) fn take(&mut self, width: u32) -> u64 {
        let (word, shift) = ((self.at / 64) as usize, self.at % 64);
        let mut value = self.words.get(word).copied().unwrap_or(0) >> shift;
        if shift + width > 64 && shift > 0 {
            value |= self.words.get(word + 1).copied().unwrap_or(0) << (64 - shift);
        }
        self.at += width;
        if width == 64 {
            value
        } else {
            value & ((1 << width) - 1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn fields_come_back_as_they_went_in(fields in proptest::collection::vec((any::<u64>(), 1u32..=64), 1..8)) {
            let total: u32 = fields.iter().map(|&(_, w)| w).sum();
            prop_assume!(total <= 320);
            let packed = fields.iter().fold(Packer::<5>::new(), |p, &(v, w)| p.put(v, w)).finish();
            let mut read = Unpacker::new(&packed);
            for &(value, width) in &fields {
                let mask = if width == 64 { u64::MAX } else { (1 << width) - 1 };
                prop_assert_eq!(read.take(width), value & mask);
            }
        }
    }
}
