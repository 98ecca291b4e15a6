//! The `time` provider: `current_time`, `weekday` and `timezone_conversion`.

use std::fmt::Write as _;

use chrono::format::{Item, StrftimeItems};
use chrono::{Datelike, NaiveDate, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::tools::{Tool, ToolError};

const DEFAULT_FORMAT: &str = "%Y-%m-%d %H:%M:%S %Z";
const DATETIME_FORMAT: &str = "%Y-%m-%d %H:%M:%S";

fn parse_zone(name: &str) -> Result<Tz, ToolError> {
    name.parse::<Tz>()
        .map_err(|_| ToolError::InvalidArguments(format!("unknown IANA time zone {name:?}")))
}

/// Formats with a strftime pattern, refusing bad patterns instead of panicking (chrono's
/// `Display` panics on them).
fn format_with<Tz2: TimeZone>(
    time: &chrono::DateTime<Tz2>,
    pattern: &str,
) -> Result<String, ToolError>
where
    Tz2::Offset: std::fmt::Display,
{
    let items: Vec<Item<'_>> = StrftimeItems::new(pattern).collect();
    if items.iter().any(|item| matches!(item, Item::Error)) {
        return Err(ToolError::InvalidArguments(format!(
            "format {pattern:?} is not a valid strftime pattern"
        )));
    }
    let mut out = String::new();
    write!(out, "{}", time.format_with_items(items.into_iter())).map_err(|_| {
        ToolError::InvalidArguments(format!("format {pattern:?} cannot be applied"))
    })?;
    Ok(out)
}

/// The current time in a time zone.
pub struct CurrentTime;

/// Arguments of [`CurrentTime`].
#[derive(Deserialize)]
pub struct CurrentTimeArgs {
    format: Option<String>,
    timezone: Option<String>,
}

impl Tool for CurrentTime {
    const NAME: &'static str = "current_time";
    const IDEMPOTENT: bool = true;
    type Args = CurrentTimeArgs;

    fn description(&self) -> String {
        "Get the current date and time, in a given IANA time zone (UTC by default).".to_owned()
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "format": {"type": "string", "description": format!("strftime pattern, default {DEFAULT_FORMAT:?}")},
                "timezone": {"type": "string", "description": "IANA time zone such as Europe/Paris; default UTC"}
            },
            "required": []
        })
    }

    async fn call(&self, args: CurrentTimeArgs) -> Result<String, ToolError> {
        let zone = parse_zone(args.timezone.as_deref().unwrap_or("UTC"))?;
        let now = Utc::now().with_timezone(&zone);
        format_with(&now, args.format.as_deref().unwrap_or(DEFAULT_FORMAT))
    }
}

/// The day of the week of a date.
pub struct Weekday;

/// Arguments of [`Weekday`].
#[derive(Deserialize)]
pub struct WeekdayArgs {
    year: i32,
    month: u32,
    day: u32,
}

impl Tool for Weekday {
    const NAME: &'static str = "weekday";
    const IDEMPOTENT: bool = true;
    type Args = WeekdayArgs;

    fn description(&self) -> String {
        "Tell which day of the week a calendar date falls on.".to_owned()
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "year": {"type": "integer", "description": "Year, e.g. 2024"},
                "month": {"type": "integer", "minimum": 1, "maximum": 12, "description": "Month, 1-12"},
                "day": {"type": "integer", "minimum": 1, "maximum": 31, "description": "Day of the month"}
            },
            "required": ["year", "month", "day"]
        })
    }

    async fn call(&self, args: WeekdayArgs) -> Result<String, ToolError> {
        let date = NaiveDate::from_ymd_opt(args.year, args.month, args.day).ok_or_else(|| {
            ToolError::InvalidArguments(format!(
                "{}-{:02}-{:02} is not a valid date",
                args.year, args.month, args.day
            ))
        })?;
        Ok(format!(
            "{} is a {}.",
            date.format("%B %-d, %Y"),
            weekday_name(date.weekday())
        ))
    }
}

fn weekday_name(day: chrono::Weekday) -> &'static str {
    match day {
        chrono::Weekday::Mon => "Monday",
        chrono::Weekday::Tue => "Tuesday",
        chrono::Weekday::Wed => "Wednesday",
        chrono::Weekday::Thu => "Thursday",
        chrono::Weekday::Fri => "Friday",
        chrono::Weekday::Sat => "Saturday",
        chrono::Weekday::Sun => "Sunday",
    }
}

/// Converts a wall-clock time from one time zone to another.
pub struct TimezoneConversion;

/// Arguments of [`TimezoneConversion`].
#[derive(Deserialize)]
pub struct TimezoneConversionArgs {
    current_time: String,
    current_timezone: String,
    target_timezone: String,
}

impl Tool for TimezoneConversion {
    const NAME: &'static str = "timezone_conversion";
    const IDEMPOTENT: bool = true;
    type Args = TimezoneConversionArgs;

    fn description(&self) -> String {
        "Convert a date and time from one IANA time zone to another.".to_owned()
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "current_time": {"type": "string", "description": "Time to convert, as YYYY-MM-DD HH:MM:SS"},
                "current_timezone": {"type": "string", "description": "IANA zone the time is in"},
                "target_timezone": {"type": "string", "description": "IANA zone to convert to"}
            },
            "required": ["current_time", "current_timezone", "target_timezone"]
        })
    }

    async fn call(&self, args: TimezoneConversionArgs) -> Result<String, ToolError> {
        let from = parse_zone(&args.current_timezone)?;
        let to = parse_zone(&args.target_timezone)?;
        let naive = NaiveDateTime::parse_from_str(args.current_time.trim(), DATETIME_FORMAT)
            .map_err(|_| {
                ToolError::InvalidArguments(format!(
                    "current_time {:?} is not in the form YYYY-MM-DD HH:MM:SS",
                    args.current_time
                ))
            })?;
        let local = from.from_local_datetime(&naive).earliest().ok_or_else(|| {
            ToolError::InvalidArguments(format!(
                "{} does not exist in {from} (a daylight-saving gap)",
                args.current_time
            ))
        })?;
        Ok(local.with_timezone(&to).format(DATETIME_FORMAT).to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn current_time_honours_format_and_zone() {
        let args = CurrentTimeArgs {
            format: Some("%Z".into()),
            timezone: Some("Asia/Tokyo".into()),
        };
        assert_eq!(CurrentTime.call(args).await.unwrap(), "JST");
    }

    #[tokio::test]
    async fn bad_patterns_and_zones_are_errors_not_panics() {
        let bad_format = CurrentTimeArgs {
            format: Some("%Q %".into()),
            timezone: None,
        };
        assert!(CurrentTime.call(bad_format).await.is_err());
        let bad_zone = CurrentTimeArgs {
            format: None,
            timezone: Some("Mars/Olympus".into()),
        };
        let err = CurrentTime.call(bad_zone).await.unwrap_err();
        assert!(err.to_string().contains("Mars/Olympus"));
    }

    #[tokio::test]
    async fn weekday_names_the_day() {
        let args = WeekdayArgs {
            year: 2024,
            month: 1,
            day: 1,
        };
        assert_eq!(
            Weekday.call(args).await.unwrap(),
            "January 1, 2024 is a Monday."
        );
        let invalid = WeekdayArgs {
            year: 2023,
            month: 2,
            day: 29,
        };
        assert!(Weekday.call(invalid).await.is_err());
    }

    #[tokio::test]
    async fn conversion_applies_both_offsets() {
        let args = TimezoneConversionArgs {
            current_time: "2024-07-01 12:00:00".into(),
            current_timezone: "Europe/Paris".into(),
            target_timezone: "America/New_York".into(),
        };
        assert_eq!(
            TimezoneConversion.call(args).await.unwrap(),
            "2024-07-01 06:00:00"
        );
    }
}
