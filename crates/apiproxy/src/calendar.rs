//! UTC calendar dates of epoch milliseconds, clamped to the years 1970 to 9999. One file compiled
//! into both crates of the package: the library's `Date` header and the binary's file stamps.

/// The last instant a four-digit year can name: 9999-12-31T23:59:59.999Z, in epoch milliseconds
/// (also the last an HTTP date can name).
pub(crate) const LAST_HTTP_DATE_MS: i64 = 253_402_300_799_999;

/// The UTC (year, month 1..=12, day 1..=31, second of the day) of `ms` epoch milliseconds,
/// clamped to `0..=LAST_HTTP_DATE_MS` (a four-digit year).
pub(crate) fn utc(ms: i64) -> (i64, i64, i64, i64) {
    let secs = ms.clamp(0, LAST_HTTP_DATE_MS).div_euclid(1000);
    let (days, secs_of_day) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    (year, month, day, secs_of_day)
}

/// The proleptic Gregorian (year, month 1..=12, day 1..=31) of a day count since 1970-01-01
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 { shifted_month + 3 } else { shifted_month - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}
