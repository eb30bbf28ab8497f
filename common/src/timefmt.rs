//! Times as people read them: UTC timestamps from milliseconds since the Unix epoch; and the
//! wall clock the servers and the CLI stamp them with (`now_ms`, the one place outside the
//! core that reads it as milliseconds: the core takes the time as an argument). The calendar
//! is the `time` crate's.

use time::{Date, Month, OffsetDateTime, PrimitiveDateTime, Time};

/// Milliseconds since the Unix epoch by the system clock; 0 on a clock set before 1970.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// `2026-11-21T06:27:34Z` (seconds resolution). A time outside the years -9999 to 9999 prints
/// its milliseconds.
pub fn utc(ms: i64) -> String {
    match OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000)) {
        Ok(t) => format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        ),
        Err(_) => format!("{ms} ms since 1970"),
    }
}

/// `2026-11-21T06:27:34.594Z` (milliseconds resolution).
pub fn utc_ms(ms: i64) -> String {
    let s = utc(ms);
    format!("{}.{:03}Z", s.trim_end_matches('Z'), ms.rem_euclid(1000))
}

/// Reads `2026-11-21T06:27:34Z` (or without the `Z`, or a date alone: its midnight) back to
/// milliseconds since the Unix epoch, as UTC. A date or time that does not exist (February
/// 30th, 24:00) is `None`.
pub fn parse_utc(s: &str) -> Option<i64> {
    let s = s.trim().trim_end_matches('Z');
    let (date, clock) = s.split_once('T').unwrap_or((s, "00:00:00"));
    let mut d = date.splitn(3, '-').map(|x| x.parse::<i32>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = clock.splitn(3, ':').map(|x| x.parse::<u8>().ok());
    let (hh, mm, ss) = (
        t.next()??,
        t.next().unwrap_or(Some(0))?,
        t.next().unwrap_or(Some(0))?,
    );
    let month = Month::try_from(u8::try_from(m).ok()?).ok()?;
    let date = Date::from_calendar_date(y, month, u8::try_from(day).ok()?).ok()?;
    let at = PrimitiveDateTime::new(date, Time::from_hms(hh, mm, ss).ok()?).assume_utc();
    Some(at.unix_timestamp() * 1000)
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_what_it_prints() {
        for ms in [0, 1_795_242_454_000, 951_782_400_000, -86_400_000] {
            assert_eq!(super::parse_utc(&super::utc(ms)), Some(ms));
        }
        assert_eq!(super::parse_utc("2026-11-21"), Some(1_795_219_200_000));
        assert_eq!(
            super::parse_utc("2026-11-21T06:27"),
            Some(1_795_242_420_000)
        );
        assert_eq!(super::parse_utc("yesterday"), None);
        assert_eq!(super::parse_utc("2026-13-01T00:00:00Z"), None);
        // Days and times that do not exist.
        assert_eq!(super::parse_utc("2026-02-30"), None);
        assert_eq!(super::parse_utc("2026-11-21T24:00:00Z"), None);
        assert_eq!(super::parse_utc("2024-02-29"), Some(1_709_164_800_000));
    }

    #[test]
    fn formats_utc() {
        assert_eq!(super::utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::utc(-1), "1969-12-31T23:59:59Z");
        assert_eq!(super::utc_ms(1_795_242_454_594), "2026-11-21T06:27:34.594Z");
        assert_eq!(super::utc(i64::MAX), format!("{} ms since 1970", i64::MAX));
    }
}
