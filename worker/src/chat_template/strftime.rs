//! `strftime_now(format)`, which Llama 3.x templates call to put today's date in the system
//! prompt.
//!
//! A date library for one call per request would be a heavy dependency, so this converts the
//! clock to a UTC civil date by hand (Howard Hinnant's `civil_from_days`) and formats the few
//! directives templates use. Unknown directives are copied through, as glibc's `strftime` does.
//! Python's version uses local time; a server's prompt should not depend on its time zone, so
//! this one uses UTC.

use std::time::{SystemTime, UNIX_EPOCH};

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// A UTC date and time of day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DateTime {
    year: i64,
    /// 1..=12
    month: u32,
    /// 1..=31
    day: u32,
    /// 0 = Monday
    weekday: u32,
    seconds_of_day: u32,
}

impl DateTime {
    fn from_unix(secs: i64) -> Self {
        let days = secs.div_euclid(86_400);
        let seconds_of_day = secs.rem_euclid(86_400) as u32;
        // Shift the epoch to 0000-03-01 so that leap days fall at the end of each 400-year era.
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let day_of_era = z.rem_euclid(146_097);
        let year_of_era =
            (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
        let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
        let shifted_month = (5 * day_of_year + 2) / 153;
        let day = (day_of_year - (153 * shifted_month + 2) / 5 + 1) as u32;
        let month = if shifted_month < 10 {
            shifted_month + 3
        } else {
            shifted_month - 9
        } as u32;
        let year = year_of_era + era * 400 + i64::from(month <= 2);
        // 1970-01-01 was a Thursday (3 with Monday = 0).
        let weekday = (days + 3).rem_euclid(7) as u32;
        Self {
            year,
            month,
            day,
            weekday,
            seconds_of_day,
        }
    }
}

/// Formats the current UTC time like Python's `datetime.now().strftime(format)`.
pub fn strftime_now(format: &str) -> String {
    // A clock before 1970 is a broken host, not a reason to fail the request: show the epoch.
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    render(format, &DateTime::from_unix(secs))
}

fn render(format: &str, t: &DateTime) -> String {
    let mut out = String::with_capacity(format.len() + 16);
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(directive) = chars.next() else {
            out.push('%');
            break;
        };
        let month_name = MONTHS[(t.month - 1) as usize];
        let weekday_name = WEEKDAYS[t.weekday as usize];
        match directive {
            'Y' => out.push_str(&t.year.to_string()),
            'y' => out.push_str(&format!("{:02}", t.year.rem_euclid(100))),
            'm' => out.push_str(&format!("{:02}", t.month)),
            'd' => out.push_str(&format!("{:02}", t.day)),
            'B' => out.push_str(month_name),
            'b' => out.push_str(&month_name[..3]),
            'A' => out.push_str(weekday_name),
            'a' => out.push_str(&weekday_name[..3]),
            'H' => out.push_str(&format!("{:02}", t.seconds_of_day / 3600)),
            'M' => out.push_str(&format!("{:02}", t.seconds_of_day / 60 % 60)),
            'S' => out.push_str(&format!("{:02}", t.seconds_of_day % 60)),
            '%' => out.push('%'),
            other => {
                out.push('%');
                out.push(other);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64, format: &str) -> String {
        render(format, &DateTime::from_unix(secs))
    }

    #[test]
    fn the_epoch_is_thursday_first_of_january_1970() {
        assert_eq!(
            at(0, "%A %d %B %Y %H:%M:%S"),
            "Thursday 01 January 1970 00:00:00"
        );
    }

    #[test]
    fn llama_date_formats_render_like_python() {
        // 2024-07-26 13:05:09 UTC, the default date of the Llama 3.1 template.
        let t = 1_721_999_109;
        assert_eq!(at(t, "%d %b %Y"), "26 Jul 2024");
        assert_eq!(at(t, "%Y-%m-%d"), "2024-07-26");
        assert_eq!(at(t, "%a %H:%M:%S %y"), "Fri 13:05:09 24");
    }

    #[test]
    fn leap_days_and_century_rules_hold() {
        assert_eq!(at(951_782_400, "%Y-%m-%d"), "2000-02-29");
        assert_eq!(at(4_107_542_400, "%Y-%m-%d %A"), "2100-03-01 Monday");
        assert_eq!(at(-86_400, "%Y-%m-%d"), "1969-12-31");
    }

    #[test]
    fn unknown_directives_and_literal_percents_pass_through() {
        assert_eq!(at(0, "100%% %Q %"), "100% %Q %");
    }

    #[test]
    fn now_is_after_2024() {
        let year: i64 = strftime_now("%Y").parse().expect("a year");
        assert!(year >= 2024);
    }
}
