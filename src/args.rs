//! Parsing of command arguments into validated values, free of Redis.
//!
//! Every error names the argument it is about; the reply text is built in
//! [`ArgError::message`] and nowhere else.

use std::borrow::Cow;
use std::collections::HashSet;

use crate::limiter::{
    valid_lease_us, Effect, Escalation, LeaseParamError, LeaseParams, ParamError, Params, Rules, Token, MAX_HOLDERS,
    MAX_LIMIT, MAX_PERIOD_US, MAX_TIME_US, MIN_PERIOD_US,
};

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
    /// Units asked for; negative gives units back (a refund).
    pub cost: i64,
    /// `AT`: the call's time in Unix µs, or `None` for the server's clock.
    pub at_us: Option<u64>,
    /// `EXACT`: the sliding log instead of the sliding counter.
    pub exact: bool,
    /// `BLOCK ms`: wait up to this long (0: no limit) for admission.
    pub block_ms: Option<u64>,
    /// `BAN`, `RENEW`, `BACKOFF`, `TALLY`, `FORCE`, `NOW`: the penalties.
    pub rules: Rules,
    /// `DETAIL`: the reply adds `hits`, `banned` and `next_free`.
    pub detail: bool,
    /// `TTLFROMUS µs` (or, from earlier versions, `TTLFROM ms`), internal
    /// to the propagated form: the master's clock when it ran the call, so
    /// a replica or an AOF replay sets the key's expiry to the master's
    /// instant, however late it applies it.
    pub ttl_from: Option<TtlFrom>,
}

/// The master's clock a replayed call's expiry counts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TtlFrom {
    /// Unix µs: the key expires at `(µs + reset_after in µs) / 1000` ms,
    /// the instant the master set.
    Us(u64),
    /// Unix ms, as versions before `TTLFROMUS` sent it (AOF files written
    /// then): the key expires `reset_after` ms after it.
    Ms(u64),
}

/// Longest `BLOCK` time: 3650 days in milliseconds.
pub const MAX_BLOCK_MS: u64 = 3650 * 86_400_000;

/// One limit of a `THROTTLE.ALL` call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    pub algorithm: Algorithm,
    /// Position of the key in the whole argument list (command name = 0).
    pub key_index: usize,
    /// The spec's parameters with the call's COST and AT.
    pub call: Call,
}

/// A rejected argument. Nothing is changed when a call is rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgError {
    WrongArity,
    Limit,
    Period,
    Cost,
    At,
    Block,
    Burst,
    BurstTooSlow,
    MissingValue(&'static str),
    Repeated(&'static str),
    NotForCommand(&'static str, Algorithm),
    UnknownOption(String),
    NoSpec,
    RepeatedKey,
    OptionInSpec,
    TtlFrom,
    TtlFromUs,
    InternalOption,
    PackedCall,
    FloorWithExact,
    Ban,
    Backoff,
    Tally,
    NeedsBan(&'static str),
    RenewAndBackoff,
    /// `limit` of THROTTLE.ACQUIRE.
    Holders,
    /// `lease` of THROTTLE.ACQUIRE and THROTTLE.RENEW.
    Lease,
    /// A token (`ID token`, or RELEASE's and RENEW's `token`), named.
    Token(&'static str),
    /// A rate-limit option given to a lease command.
    NotForLease(&'static str, &'static str),
    /// A bad `THROTTLE._LEASE` change.
    LeaseEffect,
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
            ArgError::Cost => "ERR invalid COST: expected an integer from -1000000000000000 to \
                1000000000000000 (negative gives units back)"
                .into(),
            ArgError::Block => "ERR invalid BLOCK: expected milliseconds, an integer from 0 (no time-out) \
                to 315360000000"
                .into(),
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
            ArgError::NoSpec => "ERR THROTTLE.ALL needs at least one FIXED, SLIDING, TOKEN or LEAKY spec".into(),
            ArgError::TtlFrom => "ERR invalid TTLFROM: expected Unix time in milliseconds, an integer \
                from 0 to 10000000000000"
                .into(),
            ArgError::TtlFromUs => "ERR invalid TTLFROMUS: expected Unix time in microseconds, an integer \
                from 0 to 10000000000000000"
                .into(),
            ArgError::InternalOption => {
                "ERR options TTLFROM and TTLFROMUS are only for replication and AOF replay".into()
            }
            ArgError::PackedCall => "ERR invalid call: expected a packed THROTTLE call".into(),
            ArgError::Ban => "ERR invalid BAN: expected a period, a positive integer with an optional \
                unit ms, s, m, h or d, from 1ms to 3650d"
                .into(),
            ArgError::Backoff => "ERR invalid BACKOFF: expected the longest ban, a period from the BAN \
                length to 3650d"
                .into(),
            ArgError::Tally => "ERR invalid TALLY: expected the most units to count, an integer from 1 to \
                1000000000000000"
                .into(),
            ArgError::NeedsBan(option) => format!("ERR option {option} needs BAN").into(),
            ArgError::RenewAndBackoff => "ERR options RENEW and BACKOFF exclude each other".into(),
            ArgError::FloorWithExact => {
                "ERR option FLOOR rounds the sliding counter's estimate: EXACT keeps a log and has none".into()
            }
            ArgError::OptionInSpec => {
                "ERR THROTTLE.ALL takes COST and AT before its specs (DETAIL too), and no BLOCK, FORCE or NOW".into()
            }
            ArgError::RepeatedKey => "ERR THROTTLE.ALL names the same key more than once".into(),
            ArgError::Holders => "ERR invalid limit: expected the most holders, an integer from 1 to 100000".into(),
            ArgError::Lease => "ERR invalid lease: expected a period, a positive integer with an optional unit \
                ms, s, m, h or d (bare numbers are seconds), from 1ms to 3650d"
                .into(),
            ArgError::Token(what) => format!("ERR invalid {what}: expected a token of 1 to 64 bytes").into(),
            ArgError::NotForLease(option, command) => format!("ERR option {option} is not valid for {command}").into(),
            ArgError::LeaseEffect => "ERR invalid lease change: expected a packed THROTTLE lease change".into(),
        }
    }
}

impl From<LeaseParamError> for ArgError {
    fn from(e: LeaseParamError) -> Self {
        match e {
            LeaseParamError::Limit => ArgError::Holders,
            LeaseParamError::Lease => ArgError::Lease,
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
pub fn parse_call<'a>(algorithm: Algorithm, args: impl Iterator<Item = &'a [u8]>) -> Result<Call, ArgError> {
    parse_call_options(algorithm, args).map(|(call, _)| call)
}

/// [`parse_call`], also telling whether `COST`, `AT` or `BLOCK` was given:
/// THROTTLE.ALL refuses them inside a spec even at their default values
/// (`COST 1` used to slip through).
fn parse_call_options<'a>(
    algorithm: Algorithm,
    mut args: impl Iterator<Item = &'a [u8]>,
) -> Result<(Call, bool), ArgError> {
    let limit = args.next().ok_or(ArgError::WrongArity)?;
    let period = args.next().ok_or(ArgError::WrongArity)?;
    let limit = parse_u64(limit).ok_or(ArgError::Limit)?;
    let period_us = parse_period_us(period).ok_or(ArgError::Period)?;

    let mut cost = None;
    let mut at_us = None;
    let mut burst = None;
    let mut exact = false;
    let mut floor_previous = false;
    let mut block_ms = None;
    let (mut ban_us, mut backoff_us, mut tally_cap) = (None, None, None);
    let mut flags = [("RENEW", false), ("FORCE", false), ("NOW", false), ("DETAIL", false)];
    let mut ttl_from = None;
    while let Some(token) = args.next() {
        if token.eq_ignore_ascii_case(b"COST") {
            let value = option_value(&mut args, "COST", cost.is_some())?;
            cost = Some(parse_i64(value).ok_or(ArgError::Cost).and_then(checked_cost)?);
        } else if token.eq_ignore_ascii_case(b"AT") {
            let value = option_value(&mut args, "AT", at_us.is_some())?;
            at_us = Some(parse_at(value)?);
        } else if let Some(parse) = ttl_from_option(token) {
            ttl_from = Some(parse(option_value(&mut args, "TTLFROM", ttl_from.is_some())?)?);
        } else if token.eq_ignore_ascii_case(b"BLOCK") {
            let value = option_value(&mut args, "BLOCK", block_ms.is_some())?;
            block_ms = Some(parse_u64(value).filter(|&ms| ms <= MAX_BLOCK_MS).ok_or(ArgError::Block)?);
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
        } else if token.eq_ignore_ascii_case(b"BAN") {
            let value = option_value(&mut args, "BAN", ban_us.is_some())?;
            ban_us = Some(parse_length_us(value).ok_or(ArgError::Ban)?);
        } else if token.eq_ignore_ascii_case(b"BACKOFF") {
            let value = option_value(&mut args, "BACKOFF", backoff_us.is_some())?;
            backoff_us = Some(parse_length_us(value).ok_or(ArgError::Backoff)?);
        } else if token.eq_ignore_ascii_case(b"TALLY") {
            let value = option_value(&mut args, "TALLY", tally_cap.is_some())?;
            tally_cap = Some(parse_u64(value).filter(|cap| (1..=MAX_LIMIT).contains(cap)).ok_or(ArgError::Tally)?);
        } else if let Some((name, flag)) =
            flags.iter_mut().find(|(name, _)| token.eq_ignore_ascii_case(name.as_bytes()))
        {
            if *flag {
                return Err(ArgError::Repeated(name));
            }
            *flag = true;
        } else if token.eq_ignore_ascii_case(b"FLOOR") {
            if algorithm != Algorithm::Sliding {
                return Err(ArgError::NotForCommand("FLOOR", algorithm));
            }
            if floor_previous {
                return Err(ArgError::Repeated("FLOOR"));
            }
            floor_previous = true;
        } else {
            return Err(ArgError::UnknownOption(printable(token)));
        }
    }
    if exact && floor_previous {
        return Err(ArgError::FloorWithExact);
    }
    let params = Params::new(limit, period_us, burst)?;
    let params = if floor_previous { params.with_floor_previous() } else { params };
    let [(_, renew), (_, force), (_, ban_now), (_, detail)] = flags;
    let rules = penalty_rules(ban_us, renew, backoff_us, tally_cap, force, ban_now)?;
    let timed =
        cost.is_some() || at_us.is_some() || block_ms.is_some() || ttl_from.is_some() || force || ban_now || detail;
    Ok((Call { params, cost: cost.unwrap_or(1), at_us, exact, block_ms, ttl_from, rules, detail }, timed))
}

/// The penalty options, checked together: `RENEW`, `BACKOFF` and `NOW`
/// shape a ban, so they need `BAN`; a ban renews or escalates, not both;
/// the longest ban is no shorter than the first.
fn penalty_rules(
    ban_us: Option<u64>,
    renew: bool,
    backoff_us: Option<u64>,
    tally_cap: Option<u64>,
    force: bool,
    ban_now: bool,
) -> Result<Rules, ArgError> {
    for (given, name) in [(renew, "RENEW"), (backoff_us.is_some(), "BACKOFF"), (ban_now, "NOW")] {
        if given && ban_us.is_none() {
            return Err(ArgError::NeedsBan(name));
        }
    }
    let escalation = match (renew, backoff_us) {
        (true, Some(_)) => return Err(ArgError::RenewAndBackoff),
        (true, None) => Escalation::Renew,
        (false, Some(max_us)) if ban_us.is_some_and(|ban| max_us >= ban) => Escalation::Backoff { max_us },
        (false, Some(_)) => return Err(ArgError::Backoff),
        (false, None) => Escalation::Plain,
    };
    Ok(Rules { ban_us, escalation, tally_cap, force, ban_now })
}

/// A ban's length: a period, from 1 ms to 3650 days.
fn parse_length_us(value: &[u8]) -> Option<u64> {
    parse_period_us(value).filter(|us| (MIN_PERIOD_US..=MAX_PERIOD_US).contains(us) && us.is_multiple_of(1_000))
}

/// Parses `THROTTLE.ALL [COST n] [AT µs] [DETAIL] spec [spec ...]`, `args`
/// being the whole argument list (command name first). Each spec is
/// `FIXED|SLIDING|TOKEN|LEAKY key limit period` and its own options
/// (`BURST`, `EXACT`, `FLOOR`, `BAN`, `RENEW`, `BACKOFF`, `TALLY`).
pub fn parse_all(args: &[&[u8]]) -> Result<Vec<Spec>, ArgError> {
    let mut cost = None;
    let mut at_us = None;
    let mut ttl_from = None;
    let mut detail = false;
    let mut i = 1;
    while let Some(token) = args.get(i) {
        let mut rest = args.get(i + 1..).unwrap_or_default().iter().copied();
        if token.eq_ignore_ascii_case(b"DETAIL") {
            if detail {
                return Err(ArgError::Repeated("DETAIL"));
            }
            detail = true;
            i += 1;
            continue;
        }
        if token.eq_ignore_ascii_case(b"COST") {
            let value = option_value(&mut rest, "COST", cost.is_some())?;
            cost = Some(parse_i64(value).ok_or(ArgError::Cost).and_then(checked_cost)?);
        } else if token.eq_ignore_ascii_case(b"AT") {
            let value = option_value(&mut rest, "AT", at_us.is_some())?;
            at_us = Some(parse_at(value)?);
        } else if let Some(parse) = ttl_from_option(token) {
            ttl_from = Some(parse(option_value(&mut rest, "TTLFROM", ttl_from.is_some())?)?);
        } else {
            break;
        }
        i += 2;
    }
    let mut specs: Vec<Spec> = Vec::new();
    let mut keys = SeenKeys::default();
    while let Some(token) = args.get(i) {
        let algorithm = algorithm_named(token).ok_or_else(|| ArgError::UnknownOption(printable(token)))?;
        // The spec ends where the next algorithm name starts (after this
        // spec's key, limit and period, which may look like one).
        let end = (i + 4..args.len())
            .find(|&j| args.get(j).is_some_and(|t| algorithm_named(t).is_some()))
            .unwrap_or(args.len());
        let fields = args.get(i + 2..end).ok_or(ArgError::WrongArity)?;
        if fields.len() < 2 {
            return Err(ArgError::WrongArity);
        }
        let (call, timed) = parse_call_options(algorithm, fields.iter().copied())?;
        if timed {
            return Err(ArgError::OptionInSpec);
        }
        let key = args.get(i + 1).copied().ok_or(ArgError::WrongArity)?;
        if !keys.insert(key, &specs, args) {
            return Err(ArgError::RepeatedKey);
        }
        specs.push(Spec {
            algorithm,
            key_index: i + 1,
            call: Call { cost: cost.unwrap_or(1), at_us, ttl_from, detail, ..call },
        });
        i = end;
    }
    if specs.is_empty() {
        return Err(ArgError::NoSpec);
    }
    Ok(specs)
}

/// The keys of the specs parsed so far, to refuse a key named twice in
/// O(1) per spec: a scan of the specs while they are few (no allocation
/// for the usual two or three), a hash set once they are more, so a call
/// with N specs costs O(N), not O(N²).
#[derive(Default)]
struct SeenKeys<'a> {
    index: Option<HashSet<&'a [u8]>>,
}

impl<'a> SeenKeys<'a> {
    /// Up to this many specs a scan is cheaper than hashing.
    const SCANNED: usize = 8;

    /// Adds `key`, the key of the spec after `specs`; false if one of
    /// them named it already.
    fn insert(&mut self, key: &'a [u8], specs: &[Spec], args: &[&'a [u8]]) -> bool {
        if let Some(index) = &mut self.index {
            return index.insert(key);
        }
        let named = |spec: &Spec| args.get(spec.key_index).copied();
        if specs.iter().any(|spec| named(spec) == Some(key)) {
            return false;
        }
        if specs.len() >= Self::SCANNED {
            self.index = Some(specs.iter().filter_map(named).chain([key]).collect());
        }
        true
    }
}

fn algorithm_named(token: &[u8]) -> Option<Algorithm> {
    [
        (&b"FIXED"[..], Algorithm::Fixed),
        (b"SLIDING", Algorithm::Sliding),
        (b"TOKEN", Algorithm::Token),
        (b"LEAKY", Algorithm::Leaky),
    ]
    .into_iter()
    .find(|(name, _)| token.eq_ignore_ascii_case(name))
    .map(|(_, algorithm)| algorithm)
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

/// `COST` within its bounds, whether it came as a word or packed.
fn checked_cost(cost: i64) -> Result<i64, ArgError> {
    if cost.unsigned_abs() <= MAX_LIMIT {
        Ok(cost)
    } else {
        Err(ArgError::Cost)
    }
}

/// `AT µs`'s value, in its bounds.
pub fn parse_at(value: &[u8]) -> Result<u64, ArgError> {
    parse_u64(value).ok_or(ArgError::At).and_then(checked_at)
}

/// `AT` within its bounds.
fn checked_at(at_us: u64) -> Result<u64, ArgError> {
    if at_us <= MAX_TIME_US {
        Ok(at_us)
    } else {
        Err(ArgError::At)
    }
}

/// `TTLFROMUS` and `TTLFROM` within their bounds: the latest `AT`.
fn checked_ttl_from(ttl_from: TtlFrom) -> Result<TtlFrom, ArgError> {
    match ttl_from {
        TtlFrom::Us(us) if us <= MAX_TIME_US => Ok(ttl_from),
        TtlFrom::Ms(ms) if ms <= MAX_TIME_US / 1000 => Ok(ttl_from),
        TtlFrom::Us(_) => Err(ArgError::TtlFromUs),
        TtlFrom::Ms(_) => Err(ArgError::TtlFrom),
    }
}

/// Parses an option's value.
type ValueParser<T> = fn(&[u8]) -> Result<T, ArgError>;

/// The parser of `TTLFROMUS`'s or `TTLFROM`'s value when `token` names
/// either (they are one option: at most one of them per call).
fn ttl_from_option(token: &[u8]) -> Option<ValueParser<TtlFrom>> {
    if token.eq_ignore_ascii_case(b"TTLFROMUS") {
        Some(|value| parse_u64(value).map(TtlFrom::Us).ok_or(ArgError::TtlFromUs).and_then(checked_ttl_from))
    } else if token.eq_ignore_ascii_case(b"TTLFROM") {
        Some(|value| parse_u64(value).map(TtlFrom::Ms).ok_or(ArgError::TtlFrom).and_then(checked_ttl_from))
    } else {
        None
    }
}

/// A plain decimal integer with an optional leading `-`.
pub fn parse_i64(bytes: &[u8]) -> Option<i64> {
    match bytes.split_first() {
        Some((b'-', digits)) => parse_u64(digits).and_then(|n| 0i64.checked_sub_unsigned(n)),
        _ => parse_u64(bytes).and_then(|n| i64::try_from(n).ok()),
    }
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

/// `THROTTLE.ACQUIRE key limit lease [ID token] [BLOCK ms] [AT µs]`, after
/// the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acquire {
    pub params: LeaseParams,
    /// `ID`: the caller's token; without it the master makes one.
    pub token: Option<Token>,
    pub block_ms: Option<u64>,
    pub at_us: Option<u64>,
}

/// `THROTTLE.RELEASE key token [AT µs]` (`lease_us: None`) or
/// `THROTTLE.RENEW key token lease [AT µs]`, after the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    pub token: Token,
    pub lease_us: Option<u64>,
    pub at_us: Option<u64>,
}

/// The rate-limit options, refused by name on the lease commands.
const RATE_OPTIONS: [&str; 12] =
    ["COST", "BURST", "EXACT", "FLOOR", "BAN", "RENEW", "BACKOFF", "TALLY", "FORCE", "NOW", "DETAIL", "TTLFROMUS"];

/// The error for an option the lease command `command` does not take.
fn not_for_lease(token: &[u8], command: &'static str) -> ArgError {
    match RATE_OPTIONS.iter().find(|name| token.eq_ignore_ascii_case(name.as_bytes())) {
        Some(name) => ArgError::NotForLease(name, command),
        None => ArgError::UnknownOption(printable(token)),
    }
}

fn parse_lease_us(value: &[u8]) -> Result<u64, ArgError> {
    parse_period_us(value).filter(|&us| valid_lease_us(us)).ok_or(ArgError::Lease)
}

/// Parses `limit lease [ID token] [BLOCK ms] [AT µs]`.
pub fn parse_acquire<'a>(mut args: impl Iterator<Item = &'a [u8]>) -> Result<Acquire, ArgError> {
    let limit = args.next().ok_or(ArgError::WrongArity)?;
    let lease = args.next().ok_or(ArgError::WrongArity)?;
    let limit = parse_u64(limit).filter(|n| (1..=MAX_HOLDERS).contains(n)).ok_or(ArgError::Holders)?;
    let lease_us = parse_lease_us(lease)?;
    let (mut token, mut block_ms, mut at_us) = (None, None, None);
    while let Some(word) = args.next() {
        if word.eq_ignore_ascii_case(b"ID") {
            let value = option_value(&mut args, "ID", token.is_some())?;
            token = Some(Token::new(value).ok_or(ArgError::Token("ID"))?);
        } else if word.eq_ignore_ascii_case(b"BLOCK") {
            let value = option_value(&mut args, "BLOCK", block_ms.is_some())?;
            block_ms = Some(parse_u64(value).filter(|&ms| ms <= MAX_BLOCK_MS).ok_or(ArgError::Block)?);
        } else if word.eq_ignore_ascii_case(b"AT") {
            let value = option_value(&mut args, "AT", at_us.is_some())?;
            at_us = Some(parse_at(value)?);
        } else {
            return Err(not_for_lease(word, "THROTTLE.ACQUIRE"));
        }
    }
    Ok(Acquire { params: LeaseParams::new(limit, lease_us)?, token, block_ms, at_us })
}

/// Parses `token [AT µs]` (RELEASE) or `token lease [AT µs]` (RENEW).
pub fn parse_holder<'a>(renew: bool, mut args: impl Iterator<Item = &'a [u8]>) -> Result<Holder, ArgError> {
    let command = if renew { "THROTTLE.RENEW" } else { "THROTTLE.RELEASE" };
    let token = args.next().ok_or(ArgError::WrongArity)?;
    let token = Token::new(token).ok_or(ArgError::Token("token"))?;
    let lease_us = if renew { Some(parse_lease_us(args.next().ok_or(ArgError::WrongArity)?)?) } else { None };
    let mut at_us = None;
    while let Some(word) = args.next() {
        if word.eq_ignore_ascii_case(b"AT") {
            let value = option_value(&mut args, "AT", at_us.is_some())?;
            at_us = Some(parse_at(value)?);
        } else if word.eq_ignore_ascii_case(b"BLOCK") || word.eq_ignore_ascii_case(b"ID") {
            let name = if word.eq_ignore_ascii_case(b"ID") { "ID" } else { "BLOCK" };
            return Err(ArgError::NotForLease(name, command));
        } else {
            return Err(not_for_lease(word, command));
        }
    }
    Ok(Holder { token, lease_us, at_us })
}

/// A change to a key's leases as replicas and the AOF receive it
/// (`THROTTLE._LEASE key <change>`): the [`Effect`] and the master's clock
/// (the key's expiry counts from it), in binary.
pub struct PackedEffect {
    bytes: [u8; PackedEffect::CAPACITY],
    len: usize,
}

impl PackedEffect {
    const VERSION: u8 = 1;
    /// Version, `p` (put) or `r` (remove), then the change's time, the
    /// limit, the lease's end (0 for a removal) and the master's clock,
    /// each a little-endian word, then the token's bytes.
    const HEAD: usize = 2 + 8 * 4;
    const CAPACITY: usize = PackedEffect::HEAD + crate::limiter::MAX_TOKEN_LEN;

    pub fn new(effect: &Effect, clock_us: u64) -> PackedEffect {
        let mut bytes = [0; PackedEffect::CAPACITY];
        bytes[0] = PackedEffect::VERSION;
        bytes[1] = if effect.until_us.is_some() { b'p' } else { b'r' };
        let words = [effect.at_us, effect.limit, effect.until_us.unwrap_or(0), clock_us];
        for (slot, word) in bytes[2..PackedEffect::HEAD].chunks_exact_mut(8).zip(words) {
            slot.copy_from_slice(&word.to_le_bytes());
        }
        let token = effect.token.as_bytes();
        let len = PackedEffect::HEAD + token.len();
        if let Some(slot) = bytes.get_mut(PackedEffect::HEAD..len) {
            slot.copy_from_slice(token);
        }
        PackedEffect { bytes, len }
    }

    pub fn bytes(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or_default()
    }

    /// The change and the master's clock, every field in its bounds: a
    /// hand-made argument is refused.
    pub fn unpack(bytes: &[u8]) -> Result<(Effect, u64), ArgError> {
        let bad = || ArgError::LeaseEffect;
        let (head, token) = bytes.split_at_checked(PackedEffect::HEAD).ok_or_else(bad)?;
        let [version, op, words @ ..] = head else { return Err(bad()) };
        if *version != PackedEffect::VERSION {
            return Err(bad());
        }
        let mut word = words.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()));
        let mut next = || word.next().ok_or_else(bad);
        let (at_us, limit, until_us, clock_us) = (next()?, next()?, next()?, next()?);
        let token = Token::new(token).ok_or_else(bad)?;
        if at_us > MAX_TIME_US || clock_us > MAX_TIME_US || !(1..=MAX_HOLDERS).contains(&limit) {
            return Err(bad());
        }
        let until_us = match op {
            b'p' if until_us > at_us && until_us - at_us <= MAX_PERIOD_US => Some(until_us),
            b'r' if until_us == 0 => None,
            _ => return Err(bad()),
        };
        Ok((Effect { at_us, limit, token, until_us }, clock_us))
    }
}

/// A call as replicas and the AOF receive it (`THROTTLE._CALL key <call>`):
/// the algorithm and every value the call ran with, its time and the
/// master's clock included, in binary. One argument instead of a dozen
/// words: replicating it costs Redis one string instead of one per word.
pub struct PackedCall {
    bytes: [u8; PackedCall::LEN_RULES],
    len: usize,
}

impl PackedCall {
    /// With penalties: version 2's words, then the ban's length (0: no
    /// BAN), the longest ban (0: no BACKOFF), the tally's cap (0: no
    /// TALLY) and the flags RENEW, FORCE and NOW.
    const VERSION_RULES: u8 = 3;
    /// The master's clock in µs ([`TtlFrom::Us`]).
    const VERSION: u8 = 2;
    /// The master's clock in ms ([`TtlFrom::Ms`]), as earlier versions
    /// packed it: replicas still run the calls of AOF files written then.
    const VERSION_MS: u8 = 1;
    /// Version, algorithm, then limit, period (µs), burst, cost, time (µs)
    /// and the master's clock, each a little-endian word.
    const LEN: usize = 2 + 8 * 6;
    const LEN_RULES: usize = PackedCall::LEN + 8 * 4;
    const RENEW: u64 = 1;
    const FORCE: u64 = 2;
    const NOW: u64 = 4;

    pub fn new(algorithm: Algorithm, call: &Call, now_us: u64, ttl_from: TtlFrom) -> PackedCall {
        let mut bytes = [0; PackedCall::LEN_RULES];
        let (version, clock) = match ttl_from {
            TtlFrom::Us(us) if !call.rules.is_none() => (PackedCall::VERSION_RULES, us),
            TtlFrom::Us(us) => (PackedCall::VERSION, us),
            TtlFrom::Ms(ms) => (PackedCall::VERSION_MS, ms),
        };
        bytes[0] = version;
        bytes[1] = match (algorithm, call.exact) {
            (Algorithm::Fixed, _) => b'f',
            (Algorithm::Sliding, false) => b's',
            (Algorithm::Sliding, true) => b'e',
            (Algorithm::Token, _) => b't',
            (Algorithm::Leaky, _) => b'l',
        };
        let p = &call.params;
        let r = &call.rules;
        let backoff_us = match r.escalation {
            Escalation::Backoff { max_us } => max_us,
            _ => 0,
        };
        let flags = [
            (r.escalation == Escalation::Renew, PackedCall::RENEW),
            (r.force, PackedCall::FORCE),
            (r.ban_now, PackedCall::NOW),
        ]
        .iter()
        .filter(|(set, _)| *set)
        .fold(0, |flags, (_, bit)| flags | bit);
        let words = [
            p.limit(),
            p.period_us(),
            p.burst(),
            call.cost as u64,
            now_us,
            clock,
            r.ban_us.unwrap_or(0),
            backoff_us,
            r.tally_cap.unwrap_or(0),
            flags,
        ];
        for (slot, word) in bytes[2..].chunks_exact_mut(8).zip(words) {
            slot.copy_from_slice(&word.to_le_bytes());
        }
        let len = if version == PackedCall::VERSION_RULES { PackedCall::LEN_RULES } else { PackedCall::LEN };
        PackedCall { bytes, len }
    }

    pub fn bytes(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or_default()
    }

    /// The algorithm and the call, validated as the command's own words
    /// are: a hand-made argument is refused, never run half-checked.
    pub fn unpack(bytes: &[u8]) -> Result<(Algorithm, Call), ArgError> {
        let bad = || ArgError::PackedCall;
        let [version, kind, words @ ..] = bytes else { return Err(bad()) };
        let (clock_in, len): (fn(u64) -> TtlFrom, usize) = match *version {
            PackedCall::VERSION_RULES => (TtlFrom::Us, PackedCall::LEN_RULES),
            PackedCall::VERSION => (TtlFrom::Us, PackedCall::LEN),
            PackedCall::VERSION_MS => (TtlFrom::Ms, PackedCall::LEN),
            _ => return Err(bad()),
        };
        if words.len() + 2 != len {
            return Err(bad());
        }
        let (algorithm, exact) = match kind {
            b'f' => (Algorithm::Fixed, false),
            b's' => (Algorithm::Sliding, false),
            b'e' => (Algorithm::Sliding, true),
            b't' => (Algorithm::Token, false),
            b'l' => (Algorithm::Leaky, false),
            _ => return Err(bad()),
        };
        let mut word = words.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()));
        let mut next = || word.next().ok_or_else(bad);
        let (limit, period_us, burst, cost, at_us, clock) =
            (next()?, next()?, next()?, next()? as i64, next()?, next()?);
        let params = Params::new(limit, period_us, algorithm.is_bucket().then_some(burst))?;
        if params.burst() != burst {
            return Err(bad());
        }
        let (cost, at_us, ttl_from) = (checked_cost(cost)?, checked_at(at_us)?, checked_ttl_from(clock_in(clock))?);
        let rules = if *version == PackedCall::VERSION_RULES {
            let (ban_us, backoff_us, tally_cap, flags) = (next()?, next()?, next()?, next()?);
            if flags & !(PackedCall::RENEW | PackedCall::FORCE | PackedCall::NOW) != 0 {
                return Err(bad());
            }
            let length = |us: u64| (MIN_PERIOD_US..=MAX_PERIOD_US).contains(&us) && us.is_multiple_of(1_000);
            let given = |w: u64| (w != 0).then_some(w);
            if given(ban_us).is_some_and(|us| !length(us)) || given(backoff_us).is_some_and(|us| !length(us)) {
                return Err(bad());
            }
            if tally_cap > MAX_LIMIT {
                return Err(bad());
            }
            penalty_rules(
                given(ban_us),
                flags & PackedCall::RENEW != 0,
                given(backoff_us),
                given(tally_cap),
                flags & PackedCall::FORCE != 0,
                flags & PackedCall::NOW != 0,
            )?
        } else {
            Rules::default()
        };
        let call = Call {
            params,
            cost,
            at_us: Some(at_us),
            exact,
            block_ms: None,
            ttl_from: Some(ttl_from),
            rules,
            detail: false,
        };
        Ok((algorithm, call))
    }
}

/// An unknown token as it may be shown in an error: at most 64 bytes,
/// anything but printable ASCII escaped.
fn printable(token: &[u8]) -> String {
    let mut shown: String =
        token.iter().take(64).flat_map(|&b| std::ascii::escape_default(b)).map(char::from).collect();
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
        let c = parse(Algorithm::Sliding, "20 1 floor").unwrap();
        assert!(c.params.floor_previous() && !c.exact);
        let c = parse(Algorithm::Sliding, "20 1 EXACT").unwrap();
        assert!(!c.params.floor_previous());
        assert_eq!((c.cost, c.at_us, c.exact, c.params.burst()), (1, None, true, 20));
        let c = parse(Algorithm::Fixed, "20 1 COST -5 block 0").unwrap();
        assert_eq!((c.cost, c.block_ms), (-5, Some(0)));
        let c = parse(Algorithm::Fixed, "20 1 TTLFROM 1700000000000").unwrap();
        assert_eq!(c.ttl_from, Some(TtlFrom::Ms(1_700_000_000_000)));
        assert_eq!(parse(Algorithm::Fixed, "20 1 TTLFROM 10000000000001"), Err(ArgError::TtlFrom));
        let c = parse(Algorithm::Fixed, "20 1 ttlfromus 1700000000000123").unwrap();
        assert_eq!(c.ttl_from, Some(TtlFrom::Us(1_700_000_000_000_123)));
        assert_eq!(parse(Algorithm::Fixed, "20 1 TTLFROMUS 10000000000000001"), Err(ArgError::TtlFromUs));
        assert_eq!(parse(Algorithm::Fixed, "20 1 TTLFROMUS 1 TTLFROM 1"), Err(ArgError::Repeated("TTLFROM")));
        assert_eq!(parse_i64(b"-0"), Some(0));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"9223372036854775808"), None);
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
            (Algorithm::Fixed, "1 1 COST --1", ArgError::Cost),
            (Algorithm::Fixed, "1 1 COST 1000000000000001", ArgError::Cost),
            (Algorithm::Fixed, "1 1 COST -1000000000000001", ArgError::Cost),
            (Algorithm::Fixed, "1 1 BLOCK -1", ArgError::Block),
            (Algorithm::Fixed, "1 1 BLOCK 315360000001", ArgError::Block),
            (Algorithm::Fixed, "1 1 BLOCK 1 BLOCK 1", ArgError::Repeated("BLOCK")),
            (Algorithm::Fixed, "1 1 COST 1 COST 1", ArgError::Repeated("COST")),
            (Algorithm::Fixed, "1 1 AT 10000000000000001", ArgError::At),
            (Algorithm::Fixed, "1 1 BURST 5", ArgError::NotForCommand("BURST", Algorithm::Fixed)),
            (Algorithm::Token, "1 1 EXACT", ArgError::NotForCommand("EXACT", Algorithm::Token)),
            (Algorithm::Sliding, "1 1 EXACT exact", ArgError::Repeated("EXACT")),
            (Algorithm::Sliding, "1 1 FLOOR floor", ArgError::Repeated("FLOOR")),
            (Algorithm::Sliding, "1 1 FLOOR EXACT", ArgError::FloorWithExact),
            (Algorithm::Fixed, "1 1 FLOOR", ArgError::NotForCommand("FLOOR", Algorithm::Fixed)),
            (Algorithm::Token, "1 1 FLOOR", ArgError::NotForCommand("FLOOR", Algorithm::Token)),
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
    }

    #[test]
    fn lease_commands() {
        let words = |line: &'static str| line.split(' ').filter(|w| !w.is_empty()).map(str::as_bytes);
        let a = parse_acquire(words("3 30s id job-1 BLOCK 500 at 7")).unwrap();
        assert_eq!((a.params.limit(), a.params.lease_us(), a.block_ms, a.at_us), (3, 30_000_000, Some(500), Some(7)));
        assert_eq!(a.token.map(|t| t.as_bytes().to_vec()), Some(b"job-1".to_vec()));
        assert_eq!(parse_acquire(words("1 1ms")).unwrap().token, None);
        let bad: &[(&str, ArgError)] = &[
            ("0 1s", ArgError::Holders),
            ("100001 1s", ArgError::Holders),
            ("x 1s", ArgError::Holders),
            ("1 0", ArgError::Lease),
            ("1 3651d", ArgError::Lease),
            ("1 1.5s", ArgError::Lease),
            ("1", ArgError::WrongArity),
            ("1 1s ID", ArgError::MissingValue("ID")),
            ("1 1s ID a ID b", ArgError::Repeated("ID")),
            ("1 1s BLOCK -1", ArgError::Block),
            ("1 1s AT 10000000000000001", ArgError::At),
            ("1 1s COST 2", ArgError::NotForLease("COST", "THROTTLE.ACQUIRE")),
            ("1 1s detail", ArgError::NotForLease("DETAIL", "THROTTLE.ACQUIRE")),
            ("1 1s NOPE", ArgError::UnknownOption("NOPE".into())),
        ];
        for (line, want) in bad {
            assert_eq!(parse_acquire(words(line)).as_ref(), Err(want), "{line}");
            assert!(want.message().starts_with("ERR "), "{line}");
        }
        let long = "x".repeat(65);
        let args = [&b"1"[..], b"1s", b"ID", long.as_bytes()];
        assert_eq!(parse_acquire(args.into_iter()), Err(ArgError::Token("ID")));
        assert_eq!(ArgError::Token("ID").message(), "ERR invalid ID: expected a token of 1 to 64 bytes");
        let h = parse_holder(true, words("tok 5s AT 9")).unwrap();
        assert_eq!((h.token.as_bytes(), h.lease_us, h.at_us), (&b"tok"[..], Some(5_000_000), Some(9)));
        let h = parse_holder(false, words("tok")).unwrap();
        assert_eq!((h.lease_us, h.at_us), (None, None));
        assert_eq!(parse_holder(true, words("tok")), Err(ArgError::WrongArity));
        assert_eq!(parse_holder(false, words("tok 5s")), Err(ArgError::UnknownOption("5s".into())));
        assert_eq!(parse_holder(false, words("tok BLOCK 1")), Err(ArgError::NotForLease("BLOCK", "THROTTLE.RELEASE")));
        assert_eq!(parse_holder(true, words("tok 0")), Err(ArgError::Lease));
        assert_eq!(parse_holder(false, [&b""[..]].into_iter()), Err(ArgError::Token("token")));
    }

    #[test]
    fn a_packed_lease_change_unpacks_to_the_same_and_refuses_anything_else() {
        let token = Token::new(b"job").unwrap();
        let put = Effect { at_us: MAX_TIME_US, limit: MAX_HOLDERS, token, until_us: Some(MAX_TIME_US + MAX_PERIOD_US) };
        let remove = Effect { at_us: 5, limit: 1, token, until_us: None };
        for effect in [put, remove] {
            assert_eq!(PackedEffect::unpack(PackedEffect::new(&effect, 9).bytes()), Ok((effect, 9)));
        }
        let good = PackedEffect::new(&put, 9).bytes().to_vec();
        let with = |at: usize, bytes: &[u8]| {
            let mut b = good.clone();
            b[at..at + bytes.len()].copy_from_slice(bytes);
            b
        };
        let bad: &[Vec<u8>] = &[
            vec![],
            good[..PackedEffect::HEAD].to_vec(),
            [&good[..], &[b'x'; 62]].concat(),
            with(0, &[2]),
            with(1, b"x"),
            with(1, b"r"),
            with(2, &(MAX_TIME_US + 1).to_le_bytes()),
            with(10, &0u64.to_le_bytes()),
            with(10, &(MAX_HOLDERS + 1).to_le_bytes()),
            with(18, &MAX_TIME_US.to_le_bytes()),
            with(18, &(MAX_TIME_US + MAX_PERIOD_US + 1).to_le_bytes()),
            with(26, &(MAX_TIME_US + 1).to_le_bytes()),
        ];
        for bytes in bad {
            assert_eq!(PackedEffect::unpack(bytes).map(|_| ()), Err(ArgError::LeaseEffect), "{bytes:?}");
        }
    }

    #[test]
    fn all_specs() {
        let line = "THROTTLE.ALL COST 2 AT 7 fixed a 10 1s SLIDING b 100 1h EXACT TOKEN c 5 1m BURST 9";
        let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let specs = parse_all(&args).unwrap();
        let summary: Vec<_> = specs
            .iter()
            .map(|s| (s.algorithm, s.key_index, s.call.cost, s.call.at_us, s.call.exact, s.call.params.burst()))
            .collect();
        assert_eq!(
            summary,
            vec![
                (Algorithm::Fixed, 6, 2, Some(7), false, 10),
                (Algorithm::Sliding, 10, 2, Some(7), true, 100),
                (Algorithm::Token, 15, 2, Some(7), false, 9),
            ]
        );
        // A key may be named like an algorithm: positions decide.
        let args: Vec<&[u8]> = "THROTTLE.ALL FIXED TOKEN 1 1 LEAKY FIXED 2 2".split(' ').map(str::as_bytes).collect();
        let specs = parse_all(&args).unwrap();
        assert_eq!((specs[0].key_index, specs[1].key_index), (2, 6));
        let bad: &[(&str, ArgError)] = &[
            ("THROTTLE.ALL", ArgError::NoSpec),
            ("THROTTLE.ALL COST 1", ArgError::NoSpec),
            ("THROTTLE.ALL FIXED a 1", ArgError::WrongArity),
            ("THROTTLE.ALL FIXED a 1 1 FIXED a 2 2", ArgError::RepeatedKey),
            ("THROTTLE.ALL FIXED a 1 1 BURST 2", ArgError::NotForCommand("BURST", Algorithm::Fixed)),
            ("THROTTLE.ALL BOGUS a 1 1", ArgError::UnknownOption("BOGUS".into())),
            ("THROTTLE.ALL COST x FIXED a 1 1", ArgError::Cost),
            ("THROTTLE.ALL FIXED a 1 1 COST 2", ArgError::OptionInSpec),
            // The default value is refused too: docs/commands.md allows no COST in a spec.
            ("THROTTLE.ALL FIXED a 1 1 COST 1", ArgError::OptionInSpec),
            ("THROTTLE.ALL COST 3 TOKEN a 1 1 cost 1", ArgError::OptionInSpec),
            ("THROTTLE.ALL FIXED a 1 1 BLOCK 0", ArgError::OptionInSpec),
        ];
        for (line, want) in bad {
            let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
            assert_eq!(parse_all(&args).as_ref(), Err(want), "{line}");
        }
        assert_eq!(printable(&[b'x'; 70]).len(), 67);
    }

    /// A repeated key is found wherever it is, among few specs (scanned)
    /// or many (hashed); tens of thousands of distinct keys parse.
    #[test]
    fn all_refuses_a_repeated_key_among_any_number_of_specs() {
        let line = |keys: &[String]| {
            let mut line = String::from("THROTTLE.ALL");
            for key in keys {
                line.push_str(&format!(" FIXED {key} 10 1s"));
            }
            line
        };
        let parse = |line: &str| parse_all(&line.split(' ').map(str::as_bytes).collect::<Vec<_>>()).map(|s| s.len());
        for n in [2, 7, 8, 9, 10, 100] {
            let keys: Vec<String> = (0..n).map(|i| format!("k{i}")).collect();
            assert_eq!(parse(&line(&keys)), Ok(n), "{n} distinct keys");
            for first in 0..n {
                for second in [first + 1, n] {
                    let mut keys = keys.clone();
                    keys.insert(second, keys[first].clone());
                    assert_eq!(parse(&line(&keys)), Err(ArgError::RepeatedKey), "{n} keys, k{first} again at {second}");
                }
            }
        }
        let keys: Vec<String> = (0..40_000).map(|i| format!("{{user}}:{i}")).collect();
        assert_eq!(parse(&line(&keys)), Ok(40_000));
    }

    #[test]
    fn a_packed_call_unpacks_to_the_same_call_and_refuses_anything_else() {
        let lines: &[(Algorithm, &str)] = &[
            (Algorithm::Fixed, "10 1s"),
            (Algorithm::Sliding, "1000000000000000 3650d COST -1000000000000000"),
            (Algorithm::Sliding, "5 250ms EXACT COST 3"),
            (Algorithm::Token, "3 7ms BURST 9 COST 0"),
            (Algorithm::Leaky, "1 1ms BURST 1000000"),
        ];
        for &(algorithm, line) in lines {
            let call = parse(algorithm, line).unwrap();
            for ttl_from in [TtlFrom::Us(MAX_TIME_US), TtlFrom::Ms(MAX_TIME_US / 1000)] {
                let packed = PackedCall::new(algorithm, &call, MAX_TIME_US, ttl_from);
                let sent = Call { at_us: Some(MAX_TIME_US), ttl_from: Some(ttl_from), ..call };
                assert_eq!(PackedCall::unpack(packed.bytes()), Ok((algorithm, sent)), "{line}");
            }
        }
        let call = parse(Algorithm::Fixed, "10 1s").unwrap();
        let good = PackedCall::new(Algorithm::Fixed, &call, 5, TtlFrom::Us(6)).bytes().to_vec();
        let with = |at: usize, bytes: &[u8]| {
            let mut b = good.clone();
            b[at..at + bytes.len()].copy_from_slice(bytes);
            b
        };
        let bad: &[(Vec<u8>, ArgError)] = &[
            (vec![], ArgError::PackedCall),
            (good[..good.len() - 1].to_vec(), ArgError::PackedCall),
            ([&good[..], &[0]].concat(), ArgError::PackedCall),
            (with(0, &[3]), ArgError::PackedCall),
            (with(0, &[0]), ArgError::PackedCall),
            (with(1, b"x"), ArgError::PackedCall),
            (with(2, &0u64.to_le_bytes()), ArgError::Limit),
            (with(10, &1_500u64.to_le_bytes()), ArgError::Period),
            // A window's burst is its limit.
            (with(18, &11u64.to_le_bytes()), ArgError::PackedCall),
            (with(26, &(-(MAX_LIMIT as i64) - 1).to_le_bytes()), ArgError::Cost),
            (with(34, &(MAX_TIME_US + 1).to_le_bytes()), ArgError::At),
            (with(42, &(MAX_TIME_US + 1).to_le_bytes()), ArgError::TtlFromUs),
            ([&[1][..], &with(42, &(MAX_TIME_US / 1000 + 1).to_le_bytes())[1..]].concat(), ArgError::TtlFrom),
        ];
        for (bytes, want) in bad {
            assert_eq!(PackedCall::unpack(bytes).as_ref().map(|_| ()), Err(want), "{bytes:?}");
        }
    }
}
