//! How far two byte strings agree from either end, sixteen bytes a step: the patch uses both ends
//! to pass over what two states of an object share (a byte-by-byte loop over both states was most
//! of finding where they part), the LZ4 compressor the start to measure a match.

/// How many leading bytes `x` and `y` share.
pub(crate) fn common_prefix(x: &[u8], y: &[u8]) -> usize {
    let max = x.len().min(y.len());
    let (x, y) = (&x[..max], &y[..max]);
    let (xs, _) = x.as_chunks::<16>();
    let (ys, _) = y.as_chunks::<16>();
    for (i, (p, q)) in xs.iter().zip(ys).enumerate() {
        let differ = u128::from_le_bytes(*p) ^ u128::from_le_bytes(*q);
        if differ != 0 {
            // Little-endian: the lowest set bit is in the first byte that differs.
            return i * 16 + (differ.trailing_zeros() / 8) as usize;
        }
    }
    let at = xs.len() * 16;
    at + x[at..]
        .iter()
        .zip(&y[at..])
        .take_while(|(p, q)| p == q)
        .count()
}

/// How many trailing bytes `x` and `y` share.
pub(crate) fn common_suffix(x: &[u8], y: &[u8]) -> usize {
    let max = x.len().min(y.len());
    let (x, y) = (&x[x.len() - max..], &y[y.len() - max..]);
    let (_, xs) = x.as_rchunks::<16>();
    let (_, ys) = y.as_rchunks::<16>();
    for (i, (p, q)) in xs.iter().rev().zip(ys.iter().rev()).enumerate() {
        let differ = u128::from_le_bytes(*p) ^ u128::from_le_bytes(*q);
        if differ != 0 {
            // Little-endian: the highest set bit is in the last byte that differs.
            return i * 16 + (differ.leading_zeros() / 8) as usize;
        }
    }
    let at = xs.len() * 16;
    at + x[..max - at]
        .iter()
        .rev()
        .zip(y[..max - at].iter().rev())
        .take_while(|(p, q)| p == q)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The common prefix and suffix found sixteen bytes a step are those found one at a time,
    /// for every length and place of the first and last difference.
    #[test]
    fn common_ends_are_counted_exactly() {
        for len in 0..40 {
            let x: Vec<u8> = (0..len).map(|i| b'a' + (i % 7) as u8).collect();
            for extra in [0, 1, 17] {
                let mut y = x.clone();
                y.extend(std::iter::repeat_n(b'z', extra));
                assert_eq!(common_prefix(&x, &y), len, "{len} {extra}");
                for at in 0..len {
                    let mut z = x.clone();
                    z[at] = b'#';
                    assert_eq!(common_prefix(&x, &z), at, "{len} {at}");
                    assert_eq!(common_suffix(&x, &z), len - at - 1, "{len} {at}");
                    let mut w = vec![b'z'; extra];
                    w.extend_from_slice(&z);
                    assert_eq!(common_suffix(&x, &w), len - at - 1, "{len} {at} {extra}");
                    assert_eq!(common_suffix(&w, &x), len - at - 1, "{len} {at} {extra}");
                }
                let mut w = vec![b'z'; extra];
                w.extend_from_slice(&x);
                assert_eq!(common_suffix(&x, &w), len, "{len} {extra}");
            }
        }
    }
}
