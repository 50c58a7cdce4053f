//! Dates and times as `to_jsonb()` renders them (ISO 8601, TimeZone UTC),
//! to the counts Avro's logical types hold.

/// Days since 1970-01-01 of `YYYY-MM-DD`.
pub fn date(text: &str) -> Option<i32> {
    let mut parts = text.splitn(3, '-');
    let year: i64 = parts.next()?.parse().ok()?;
    let month: i64 = parts.next()?.parse().ok()?;
    let day: i64 = parts.next()?.parse().ok()?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    i32::try_from(days_from_civil(year, month, day)).ok()
}

/// Microseconds since midnight of `HH:MM:SS[.ffffff]`.
pub fn time_micros(text: &str) -> Option<i64> {
    let (clock, fraction) = text.split_once('.').unwrap_or((text, ""));
    let mut parts = clock.splitn(3, ':');
    let h: i64 = parts.next()?.parse().ok()?;
    let m: i64 = parts.next()?.parse().ok()?;
    let s: i64 = parts.next()?.parse().ok()?;
    if h > 24
        || m > 59
        || s > 60
        || fraction.len() > 6
        || !fraction.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let micros: i64 = format!("{fraction:0<6}").parse().ok()?;
    Some(((h * 60 + m) * 60 + s) * 1_000_000 + micros)
}

/// Microseconds since the Unix epoch of `YYYY-MM-DDTHH:MM:SS[.ffffff]`
/// with an optional offset (`Z`, `+HH`, `+HH:MM`); without one the time is
/// taken as UTC (a `timestamp` without time zone).
pub fn timestamp_micros(text: &str) -> Option<i64> {
    let (day, rest) = text.split_once(['T', ' '])?;
    let days = i64::from(date(day)?);
    let (clock, offset_seconds) = split_offset(rest)?;
    Some(days * 86_400_000_000 + time_micros(clock)? - offset_seconds * 1_000_000)
}

/// The clock part and the offset in seconds east of UTC.
fn split_offset(text: &str) -> Option<(&str, i64)> {
    if let Some(clock) = text.strip_suffix('Z') {
        return Some((clock, 0));
    }
    let Some(at) = text.rfind(['+', '-']) else {
        return Some((text, 0));
    };
    let (clock, offset) = text.split_at(at);
    let sign = if offset.starts_with('-') { -1 } else { 1 };
    let mut parts = offset[1..].splitn(3, ':');
    let h: i64 = parts.next()?.parse().ok()?;
    let m: i64 = parts.next().map_or(Some(0), |m| m.parse().ok())?;
    let s: i64 = parts.next().map_or(Some(0), |s| s.parse().ok())?;
    Some((clock, sign * (h * 3600 + m * 60 + s)))
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar
/// (the era-based method: 400-year eras of 146097 days).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let month_index = (month + 9) % 12; // March = 0
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_timestamps_match_the_epoch() {
        assert_eq!(date("1970-01-01"), Some(0));
        assert_eq!(date("2024-03-01"), Some(19783));
        assert_eq!(date("1969-12-31"), Some(-1));
        assert_eq!(time_micros("12:00:00.5"), Some(43_200_500_000));
        assert_eq!(
            timestamp_micros("2024-03-01T00:00:01.000002+00:00"),
            Some(19783 * 86_400_000_000 + 1_000_002)
        );
        assert_eq!(
            timestamp_micros("2024-03-01T02:00:00+02:00"),
            Some(19783 * 86_400_000_000)
        );
        assert_eq!(
            timestamp_micros("2024-03-01T00:00:00"),
            Some(19783 * 86_400_000_000)
        );
        assert_eq!(timestamp_micros("infinity"), None);
    }
}
