//! The built-in proof-of-work captcha, as both sides compute it.
//!
//! The gateway hands out a challenge string and a difficulty `bits`; the client finds an answer
//! (a decimal number) such that `SHA-256(challenge ":" answer)` starts with at least `bits` zero
//! bits. Checking costs the gateway one hash; finding costs the client about `2^bits` hashes
//! (16 bits ≈ 65,000 hashes, tens of milliseconds of one core; each bit doubles it).

use ring::digest;

/// Leading zero bits of `SHA-256(challenge ":" answer)`.
pub fn leading_zero_bits(challenge: &str, answer: &str) -> u32 {
    let mut ctx = digest::Context::new(&digest::SHA256);
    ctx.update(challenge.as_bytes());
    ctx.update(b":");
    ctx.update(answer.as_bytes());
    let hash = ctx.finish();
    let mut bits = 0;
    for byte in hash.as_ref() {
        if *byte == 0 {
            bits += 8;
        } else {
            bits += byte.leading_zeros();
            break;
        }
    }
    bits
}

/// Whether `answer` solves `challenge` at `bits`.
pub fn solves(challenge: &str, answer: &str, bits: u32) -> bool {
    leading_zero_bits(challenge, answer) >= bits
}

/// Finds an answer by trying 0, 1, 2, ... (what a client does); `None` after `max_tries`.
pub fn solve(challenge: &str, bits: u32, max_tries: u64) -> Option<String> {
    (0..max_tries).map(|n| n.to_string()).find(|a| solves(challenge, a, bits))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_solution_has_the_bits_and_others_mostly_not() {
        let answer = solve("c1.abc", 12, 1 << 20).unwrap();
        assert!(leading_zero_bits("c1.abc", &answer) >= 12);
        assert!(solves("c1.abc", &answer, 12));
        assert!(solves("anything", "x", 0), "0 bits is no work");
        // Another challenge with the same answer almost never has 12 zero bits (p = 1/4096).
        let others = (0..8).filter(|i| solves(&format!("other-{i}"), &answer, 12)).count();
        assert!(others <= 1, "{others}");
    }
}
