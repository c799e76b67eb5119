//! Memory amounts as people write them in the config file, flags and environment: `6GiB`,
//! `512 MiB`, `6GB`, `1.5GiB`, `123456` (bytes) or `75%` (of total RAM), and the human form of a
//! byte count for messages ("5.2 GiB").
//!
//! The byte forms are parsed and printed by the `bytesize` crate. The one rule added on top: a
//! bare one-letter unit (`6G`, `512m`) is binary, because that is what `docker -m 6g`, JVM flags
//! and most memory settings mean by it, while `bytesize` alone would read it as decimal.

use std::fmt;
use std::str::FromStr;

use bytesize::ByteSize;
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// Binary units for `Display`, largest first.
const IEC_UNITS: [(u64, &str); 4] = [
    (1 << 40, "TiB"),
    (1 << 30, "GiB"),
    (1 << 20, "MiB"),
    (1 << 10, "KiB"),
];

/// A memory amount from configuration: a fixed size, or a share of the machine's RAM that is
/// resolved once the total is known.
///
/// Units: `KiB`/`MiB`/`GiB`/`TiB` are powers of 1024, `KB`/`MB`/`GB`/`TB` powers of 1000, and a
/// single letter (`K`, `M`, `G`, `T`) is treated as the binary unit: `6G` is 6 GiB. A number
/// without a unit is bytes; units are case-insensitive and may follow a space.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MemoryAmount {
    Bytes(u64),
    /// Above 0 and at most 100.
    PercentOfTotal(f64),
}

/// A memory amount that does not parse, with the text as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid memory amount {input:?}: {reason}")]
pub struct ParseMemoryAmountError {
    pub input: String,
    pub reason: String,
}

impl MemoryAmount {
    /// The amount in bytes on a machine with `total_bytes` of RAM.
    pub fn resolve(&self, total_bytes: u64) -> u64 {
        match *self {
            MemoryAmount::Bytes(bytes) => bytes,
            // f64 keeps 53 bits, far more precision than a percentage of RAM needs; the cast
            // saturates rather than wraps.
            MemoryAmount::PercentOfTotal(percent) => (total_bytes as f64 * percent / 100.0) as u64,
        }
    }
}

impl FromStr for MemoryAmount {
    type Err = ParseMemoryAmountError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let error = |reason: String| ParseMemoryAmountError {
            input: input.to_owned(),
            reason,
        };
        let text = input.trim();
        match text.strip_suffix('%') {
            Some(percent) => parse_percent(percent.trim_end())
                .map(MemoryAmount::PercentOfTotal)
                .map_err(error),
            None => parse_bytes(text).map(MemoryAmount::Bytes).map_err(error),
        }
    }
}

fn parse_percent(text: &str) -> Result<f64, String> {
    let percent: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if percent > 0.0 && percent <= 100.0 {
        Ok(percent)
    } else {
        Err("a percentage of RAM must be above 0 and at most 100".to_owned())
    }
}

fn parse_bytes(text: &str) -> Result<u64, String> {
    let number_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(number_end);
    let unit = unit.trim_start();
    let binary_letter = unit.len() == 1 && "kmgtpe".contains(unit.to_ascii_lowercase().as_str());
    let normalized = if binary_letter {
        format!("{number}{unit}i")
    } else {
        format!("{number}{unit}")
    };
    normalized
        .parse::<ByteSize>()
        .map(|size| size.as_u64())
        .map_err(|_| {
            "expected bytes (123456), a size (6GiB, 512MiB, 6GB, 1.5G) or a percentage of RAM (75%)"
                .to_owned()
        })
}

/// Writes a form that parses back to the same amount: the largest binary unit that divides it
/// exactly (`6GiB`, `1536MiB`), else plain bytes.
impl fmt::Display for MemoryAmount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            MemoryAmount::PercentOfTotal(percent) => write!(f, "{percent}%"),
            MemoryAmount::Bytes(bytes) => {
                match IEC_UNITS
                    .iter()
                    .find(|(unit, _)| bytes != 0 && bytes % unit == 0)
                {
                    Some((unit, name)) => write!(f, "{}{name}", bytes / unit),
                    None => write!(f, "{bytes}"),
                }
            }
        }
    }
}

/// TOML gives a string (`"6GiB"`, `"75%"`) or an integer (bytes).
impl<'de> Deserialize<'de> for MemoryAmount {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(MemoryAmountVisitor)
    }
}

struct MemoryAmountVisitor;

impl Visitor<'_> for MemoryAmountVisitor {
    type Value = MemoryAmount;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "a memory amount: bytes, a string such as \"6GiB\", or a percentage such as \"75%\"",
        )
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<MemoryAmount, E> {
        text.parse().map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, bytes: u64) -> Result<MemoryAmount, E> {
        Ok(MemoryAmount::Bytes(bytes))
    }

    fn visit_i64<E: de::Error>(self, bytes: i64) -> Result<MemoryAmount, E> {
        u64::try_from(bytes)
            .map(MemoryAmount::Bytes)
            .map_err(|_| E::invalid_value(de::Unexpected::Signed(bytes), &self))
    }
}

/// A byte count for people, in binary units with one decimal: "512 B", "5.2 GiB".
pub fn format_bytes(bytes: u64) -> String {
    ByteSize(bytes).display().iec().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    fn parse(text: &str) -> MemoryAmount {
        text.parse()
            .unwrap_or_else(|e| panic!("{text:?} should parse: {e}"))
    }

    #[test]
    fn binary_decimal_and_plain_byte_amounts_parse() {
        assert_eq!(parse("6GiB"), MemoryAmount::Bytes(6 * GIB));
        assert_eq!(parse("6 GiB"), MemoryAmount::Bytes(6 * GIB));
        assert_eq!(parse("512MiB"), MemoryAmount::Bytes(512 * MIB));
        assert_eq!(parse("6GB"), MemoryAmount::Bytes(6_000_000_000));
        assert_eq!(parse("1.5GiB"), MemoryAmount::Bytes(3 * GIB / 2));
        assert_eq!(parse("123456"), MemoryAmount::Bytes(123_456));
        assert_eq!(parse("  8gib "), MemoryAmount::Bytes(8 * GIB));
    }

    #[test]
    fn a_one_letter_unit_is_binary() {
        assert_eq!(parse("6G"), MemoryAmount::Bytes(6 * GIB));
        assert_eq!(parse("6 g"), MemoryAmount::Bytes(6 * GIB));
        assert_eq!(parse("512M"), MemoryAmount::Bytes(512 * MIB));
        assert_eq!(parse("1.5G"), MemoryAmount::Bytes(3 * GIB / 2));
    }

    #[test]
    fn a_percentage_resolves_against_the_total() {
        assert_eq!(parse("75%"), MemoryAmount::PercentOfTotal(75.0));
        assert_eq!(parse("12.5 %"), MemoryAmount::PercentOfTotal(12.5));
        assert_eq!(parse("75%").resolve(64 * GIB), 48 * GIB);
        assert_eq!(parse("6GiB").resolve(64 * GIB), 6 * GIB);
    }

    #[test]
    fn malformed_amounts_are_errors_naming_the_input() {
        for bad in [
            "", "GiB", "six GiB", "-5GiB", "6 XB", "6GiBs", "1.2.3G", "0%", "150%", "x%",
        ] {
            let error = bad.parse::<MemoryAmount>().expect_err(bad);
            assert_eq!(error.input, bad);
            assert!(error.to_string().contains(&format!("{bad:?}")), "{error}");
        }
    }

    #[test]
    fn display_parses_back_to_the_same_amount() {
        for text in [
            "6GiB", "1536MiB", "123456", "0", "1KiB", "2TiB", "75%", "12.5%",
        ] {
            let amount = parse(text);
            assert_eq!(amount.to_string(), text);
            assert_eq!(parse(&amount.to_string()), amount);
        }
        assert_eq!(parse("1.5GiB").to_string(), "1536MiB");
    }

    #[derive(Debug, Deserialize)]
    struct Config {
        ceiling: MemoryAmount,
    }

    #[test]
    fn toml_accepts_strings_and_integers() {
        let from = |text: &str| toml::from_str::<Config>(text).map(|c| c.ceiling);
        assert_eq!(
            from("ceiling = \"6GiB\"").unwrap(),
            MemoryAmount::Bytes(6 * GIB)
        );
        assert_eq!(
            from("ceiling = \"75%\"").unwrap(),
            MemoryAmount::PercentOfTotal(75.0)
        );
        assert_eq!(
            from("ceiling = 123456").unwrap(),
            MemoryAmount::Bytes(123_456)
        );
        let error = from("ceiling = \"lots\"").unwrap_err().to_string();
        assert!(error.contains("\"lots\""), "{error}");
        assert!(from("ceiling = -1").is_err());
    }

    #[test]
    fn byte_counts_format_in_binary_units() {
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(6 * GIB), "6.0 GiB");
        assert_eq!(format_bytes(5 * GIB + GIB / 5), "5.2 GiB");
        assert_eq!(format_bytes(300 * MIB), "300.0 MiB");
    }
}
