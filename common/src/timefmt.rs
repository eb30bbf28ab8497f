//! Times as people read them: UTC timestamps from milliseconds since the Unix epoch; and the
//! wall clock the servers and the CLI stamp them with (`now_ms`, the one place outside the
//! core that reads it as milliseconds: the core takes the time as an argument).

/// Milliseconds since the Unix epoch by the system clock; 0 on a clock set before 1970.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// `2026-11-21T06:27:34Z` (seconds resolution).
pub fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// `2026-11-21T06:27:34.594Z` (milliseconds resolution).
pub fn utc_ms(ms: i64) -> String {
    let s = utc(ms);
    format!("{}.{:03}Z", s.trim_end_matches('Z'), ms.rem_euclid(1000))
}

/// Reads `2026-11-21T06:27:34Z` (or without the `Z`, or a date alone: its midnight) back to
/// milliseconds since the Unix epoch, as UTC.
pub fn parse_utc(s: &str) -> Option<i64> {
    let s = s.trim().trim_end_matches('Z');
    let (date, time) = s.split_once('T').unwrap_or((s, "00:00:00"));
    let mut d = date.splitn(3, '-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.splitn(3, ':').map(|x| x.parse::<i64>().ok());
    let (hh, mm, ss) = (
        t.next()??,
        t.next().unwrap_or(Some(0))?,
        t.next().unwrap_or(Some(0))?,
    );
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days since 1970-01-01 from a civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 86_400) + hh * 3600 + mm * 60 + ss) * 1000)
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_what_it_prints() {
        for ms in [0, 1_795_242_454_000, 951_782_400_000] {
            assert_eq!(super::parse_utc(&super::utc(ms)), Some(ms));
        }
        assert_eq!(super::parse_utc("2026-11-21"), Some(1_795_219_200_000));
        assert_eq!(super::parse_utc("yesterday"), None);
        assert_eq!(super::parse_utc("2026-13-01T00:00:00Z"), None);
    }

    #[test]
    fn formats_utc() {
        assert_eq!(super::utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::utc_ms(1_795_242_454_594), "2026-11-21T06:27:34.594Z");
    }
}
