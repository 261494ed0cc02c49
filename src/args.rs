//! Parsing of command arguments into validated values, free of Redis.
//!
//! Every error names the argument it is about; the reply text is built in
//! [`ArgError::message`] and nowhere else.

use std::borrow::Cow;

use crate::limiter::{ParamError, Params, MAX_LIMIT, MAX_TIME_US};

/// The four algorithms, as the command names choose them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    Fixed,
    Sliding,
    Token,
    Leaky,
}

impl Algorithm {
    pub fn command_name(self) -> &'static str {
        match self {
            Algorithm::Fixed => "THROTTLE.FIXED",
            Algorithm::Sliding => "THROTTLE.SLIDING",
            Algorithm::Token => "THROTTLE.TOKEN",
            Algorithm::Leaky => "THROTTLE.LEAKY",
        }
    }

    fn is_bucket(self) -> bool {
        matches!(self, Algorithm::Token | Algorithm::Leaky)
    }
}

/// One THROTTLE call's arguments after the key, validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    pub params: Params,
    pub cost: u64,
    /// `AT`: the call's time in Unix µs, or `None` for the server's clock.
    pub at_us: Option<u64>,
    /// `EXACT`: the sliding log instead of the sliding counter.
    pub exact: bool,
}

/// A rejected argument. Nothing is changed when a call is rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgError {
    WrongArity,
    Limit,
    Period,
    Cost,
    At,
    Burst,
    BurstTooSlow,
    MissingValue(&'static str),
    Repeated(&'static str),
    NotForCommand(&'static str, Algorithm),
    UnknownOption(String),
}

impl ArgError {
    /// The error reply, `ERR` code included.
    pub fn message(&self) -> Cow<'static, str> {
        match self {
            ArgError::WrongArity => "ERR wrong number of arguments".into(),
            ArgError::Limit => "ERR invalid limit: expected an integer from 1 to 1000000000000000".into(),
            ArgError::Period => "ERR invalid period: expected a positive integer with an optional \
                unit ms, s, m, h or d (bare numbers are seconds), from 1ms to 3650d"
                .into(),
            ArgError::Cost => "ERR invalid COST: expected an integer from 0 to 1000000000000000".into(),
            ArgError::At => "ERR invalid AT: expected Unix time in microseconds, an integer \
                from 0 to 10000000000000000"
                .into(),
            ArgError::Burst => "ERR invalid BURST: expected an integer from 1 to 1000000000000000".into(),
            ArgError::BurstTooSlow => "ERR invalid BURST: at this rate a full bucket would take more \
                than 3650 days to refill"
                .into(),
            ArgError::MissingValue(option) => format!("ERR option {option} needs a value").into(),
            ArgError::Repeated(option) => format!("ERR option {option} given more than once").into(),
            ArgError::NotForCommand(option, algorithm) => {
                format!("ERR option {option} is not valid for {}", algorithm.command_name()).into()
            }
            ArgError::UnknownOption(token) => format!("ERR unknown option '{token}'").into(),
        }
    }
}

impl From<ParamError> for ArgError {
    fn from(e: ParamError) -> Self {
        match e {
            ParamError::Limit => ArgError::Limit,
            ParamError::Period => ArgError::Period,
            ParamError::Burst => ArgError::Burst,
            ParamError::BurstTooSlow => ArgError::BurstTooSlow,
        }
    }
}

/// Parses `limit period [options...]` (everything after the key).
pub fn parse_call<'a>(
    algorithm: Algorithm,
    mut args: impl Iterator<Item = &'a [u8]>,
) -> Result<Call, ArgError> {
    let limit = args.next().ok_or(ArgError::WrongArity)?;
    let period = args.next().ok_or(ArgError::WrongArity)?;
    let limit = parse_u64(limit).ok_or(ArgError::Limit)?;
    let period_us = parse_period_us(period).ok_or(ArgError::Period)?;

    let mut cost = None;
    let mut at_us = None;
    let mut burst = None;
    let mut exact = false;
    while let Some(token) = args.next() {
        if token.eq_ignore_ascii_case(b"COST") {
            let value = option_value(&mut args, "COST", cost.is_some())?;
            cost = Some(parse_u64(value).filter(|&c| c <= MAX_LIMIT).ok_or(ArgError::Cost)?);
        } else if token.eq_ignore_ascii_case(b"AT") {
            let value = option_value(&mut args, "AT", at_us.is_some())?;
            at_us = Some(parse_u64(value).filter(|&t| t <= MAX_TIME_US).ok_or(ArgError::At)?);
        } else if token.eq_ignore_ascii_case(b"BURST") {
            if !algorithm.is_bucket() {
                return Err(ArgError::NotForCommand("BURST", algorithm));
            }
            let value = option_value(&mut args, "BURST", burst.is_some())?;
            burst = Some(parse_u64(value).ok_or(ArgError::Burst)?);
        } else if token.eq_ignore_ascii_case(b"EXACT") {
            if algorithm != Algorithm::Sliding {
                return Err(ArgError::NotForCommand("EXACT", algorithm));
            }
            if exact {
                return Err(ArgError::Repeated("EXACT"));
            }
            exact = true;
        } else {
            return Err(ArgError::UnknownOption(printable(token)));
        }
    }
    let params = Params::new(limit, period_us, burst)?;
    Ok(Call { params, cost: cost.unwrap_or(1), at_us, exact })
}

fn option_value<'a>(
    args: &mut impl Iterator<Item = &'a [u8]>,
    option: &'static str,
    seen: bool,
) -> Result<&'a [u8], ArgError> {
    if seen {
        return Err(ArgError::Repeated(option));
    }
    args.next().ok_or(ArgError::MissingValue(option))
}

/// A plain decimal integer: digits only, no sign, no spaces.
pub fn parse_u64(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() || bytes.len() > 20 {
        return None;
    }
    bytes.iter().try_fold(0u64, |n, &b| {
        let digit = u64::from(b.checked_sub(b'0').filter(|d| *d <= 9)?);
        n.checked_mul(10)?.checked_add(digit)
    })
}

/// `period` in µs: digits with an optional unit (`ms s m h d`, any case);
/// bare digits are seconds.
pub fn parse_period_us(bytes: &[u8]) -> Option<u64> {
    let digits = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
    let (number, unit) = bytes.split_at(digits);
    const UNITS: [(&[u8], u64); 6] = [
        (b"", 1_000_000),
        (b"s", 1_000_000),
        (b"ms", 1_000),
        (b"m", 60_000_000),
        (b"h", 3_600_000_000),
        (b"d", 86_400_000_000),
    ];
    let (_, unit_us) = UNITS.iter().find(|(name, _)| unit.eq_ignore_ascii_case(name))?;
    parse_u64(number)?.checked_mul(*unit_us)
}

/// An unknown token as it may be shown in an error: at most 64 bytes,
/// anything but printable ASCII escaped.
fn printable(token: &[u8]) -> String {
    let mut shown: String = token.iter().take(64).flat_map(|&b| std::ascii::escape_default(b)).map(char::from).collect();
    if token.len() > 64 {
        shown.push_str("...");
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(algorithm: Algorithm, line: &str) -> Result<Call, ArgError> {
        parse_call(algorithm, line.split(' ').map(str::as_bytes))
    }

    #[test]
    fn periods() {
        let cases: &[(&str, Option<u64>)] = &[
            ("1", Some(1_000_000)),
            ("500ms", Some(500_000)),
            ("1s", Some(1_000_000)),
            ("15m", Some(900_000_000)),
            ("24h", Some(86_400_000_000)),
            ("2d", Some(172_800_000_000)),
            ("1MS", Some(1_000)),
            ("0", Some(0)),
            ("ms", None),
            ("", None),
            ("1.5s", None),
            ("-1", None),
            ("+1", None),
            ("1 s", None),
            ("1sec", None),
            ("99999999999999999999d", None),
            ("18446744073709551616", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_period_us(text.as_bytes()), *want, "{text}");
        }
    }

    #[test]
    fn calls() {
        let c = parse(Algorithm::Token, "10 1m cost 3 AT 5 burst 20").unwrap();
        assert_eq!((c.params.limit(), c.params.period_us(), c.params.burst()), (10, 60_000_000, 20));
        assert_eq!((c.cost, c.at_us, c.exact), (3, Some(5), false));
        let c = parse(Algorithm::Sliding, "20 1 EXACT").unwrap();
        assert_eq!((c.cost, c.at_us, c.exact, c.params.burst()), (1, None, true, 20));
    }

    #[test]
    fn errors_name_the_argument() {
        let cases: &[(Algorithm, &str, ArgError)] = &[
            (Algorithm::Fixed, "0 1", ArgError::Limit),
            (Algorithm::Fixed, "1000000000000001 1", ArgError::Limit),
            (Algorithm::Fixed, "x 1", ArgError::Limit),
            (Algorithm::Fixed, "-1 1", ArgError::Limit),
            (Algorithm::Fixed, "1 0", ArgError::Period),
            (Algorithm::Fixed, "1 3651d", ArgError::Period),
            (Algorithm::Fixed, "1 1 COST", ArgError::MissingValue("COST")),
            (Algorithm::Fixed, "1 1 COST -1", ArgError::Cost),
            (Algorithm::Fixed, "1 1 COST 1000000000000001", ArgError::Cost),
            (Algorithm::Fixed, "1 1 COST 1 COST 1", ArgError::Repeated("COST")),
            (Algorithm::Fixed, "1 1 AT 10000000000000001", ArgError::At),
            (Algorithm::Fixed, "1 1 BURST 5", ArgError::NotForCommand("BURST", Algorithm::Fixed)),
            (Algorithm::Token, "1 1 EXACT", ArgError::NotForCommand("EXACT", Algorithm::Token)),
            (Algorithm::Sliding, "1 1 EXACT exact", ArgError::Repeated("EXACT")),
            (Algorithm::Token, "1 1 BURST 0", ArgError::Burst),
            (Algorithm::Token, "1 3650d BURST 2", ArgError::BurstTooSlow),
            (Algorithm::Leaky, "1 1 NOPE", ArgError::UnknownOption("NOPE".into())),
            (Algorithm::Leaky, "1", ArgError::WrongArity),
        ];
        for (algorithm, line, want) in cases {
            assert_eq!(parse(*algorithm, line).as_ref(), Err(want), "{line}");
            assert!(want.message().starts_with("ERR "));
        }
        assert_eq!(printable(b"a\x00\xff"), "a\\x00\\xff");
        assert_eq!(printable(&[b'x'; 70]).len(), 67);
    }
}
