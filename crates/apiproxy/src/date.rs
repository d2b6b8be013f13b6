//! The `Date` header of every response, from the gateway's clock: a reading hyper's own header
//! would panic on (before 1970, after 9999) is clamped with a warning instead.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use axum::http::HeaderValue;
use session_core::Clock;

use crate::calendar::{LAST_HTTP_DATE_MS, utc};

/// Renders the `Date` header from a clock.
#[derive(Debug)]
pub(crate) struct DateHeader {
    clock: Arc<dyn Clock>,
    /// Whether the last reading was outside what an HTTP date can name.
    out_of_range: AtomicBool,
}

impl DateHeader {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> DateHeader {
        DateHeader { clock, out_of_range: AtomicBool::new(false) }
    }

    /// The header for now. The first reading of each spell out of range logs a warning.
    pub(crate) fn value(&self) -> HeaderValue {
        let reading = self.clock.now_ms();
        let bounded = reading.clamp(0, LAST_HTTP_DATE_MS);
        let outside = bounded != reading;
        if self.out_of_range.swap(outside, Ordering::Relaxed) != outside && outside {
            tracing::warn!(
                reading_ms = reading,
                "the clock reads outside 1970 to 9999; the Date header is clamped to that range"
            );
        }
        // Invariant: an IMF-fixdate is printable ASCII.
        HeaderValue::from_str(&http_date(bounded)).expect("an HTTP date is a valid header value")
    }
}

/// The IMF-fixdate (RFC 9110 §5.6.7) of `ms` epoch milliseconds, clamped to
/// `0..=LAST_HTTP_DATE_MS` (a four-digit year).
pub(crate) fn http_date(ms: i64) -> String {
    const WEEKDAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let (year, month, day, secs_of_day) = utc(ms);
    // 1970-01-01 was a Thursday.
    let days = ms.clamp(0, LAST_HTTP_DATE_MS).div_euclid(86_400_000);
    let weekday = WEEKDAYS[(days + 4).rem_euclid(7) as usize];
    format!(
        "{weekday}, {day:02} {} {year:04} {:02}:{:02}:{:02} GMT",
        MONTHS[month as usize - 1],
        secs_of_day / 3600,
        secs_of_day % 3600 / 60,
        secs_of_day % 60
    )
}

#[cfg(test)]
mod tests {
    use session_core::ManualClock;

    use super::*;

    fn check(ms: i64, expected: &str) {
        assert_eq!(http_date(ms), expected, "{ms}");
    }

    #[test]
    fn http_dates() {
        check(0, "Thu, 01 Jan 1970 00:00:00 GMT");
        check(784_111_777_000, "Sun, 06 Nov 1994 08:49:37 GMT");
        check(951_782_400_000, "Tue, 29 Feb 2000 00:00:00 GMT");
        check(1_700_000_000_999, "Tue, 14 Nov 2023 22:13:20 GMT");
        check(4_107_542_400_000, "Mon, 01 Mar 2100 00:00:00 GMT");
        check(LAST_HTTP_DATE_MS, "Fri, 31 Dec 9999 23:59:59 GMT");
    }

    #[test]
    fn readings_out_of_range_are_clamped() {
        let clock = Arc::new(ManualClock::new(-1));
        let date = DateHeader::new(Arc::clone(&clock) as Arc<dyn Clock>);
        assert_eq!(date.value(), "Thu, 01 Jan 1970 00:00:00 GMT");
        clock.set(i64::MIN);
        assert_eq!(date.value(), "Thu, 01 Jan 1970 00:00:00 GMT");
        clock.set(i64::MAX);
        assert_eq!(date.value(), "Fri, 31 Dec 9999 23:59:59 GMT");
        clock.set(784_111_777_000);
        assert_eq!(date.value(), "Sun, 06 Nov 1994 08:49:37 GMT");
    }
}
