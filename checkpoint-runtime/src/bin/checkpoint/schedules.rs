//! `checkpoint schedules`: the stored schedules, and pausing, unpausing and
//! deleting one.

use checkpoint_runtime::json::{rfc3339, schedule_json};
use checkpoint_runtime::Runtime;
use serde_json::{json, Value};

use crate::args::ScheduleAction;
use crate::commands::{CliError, Output};
use crate::format::{table, Column};

pub async fn run(
    rt: &Runtime,
    action: Option<ScheduleAction>,
    wide: bool,
) -> Result<Output, CliError> {
    let (name, verb, done) = match action.unwrap_or(ScheduleAction::List) {
        ScheduleAction::List => return list(rt, wide).await,
        ScheduleAction::Pause { name } => {
            rt.pause_schedule(&name).await?;
            (name, "paused", "no tick fires until it is unpaused")
        }
        ScheduleAction::Unpause { name } => {
            rt.unpause_schedule(&name).await?;
            (name, "unpaused", "its ticks fire again")
        }
        ScheduleAction::Delete { name } => {
            rt.delete_schedule(&name).await?;
            (name, "deleted", "its runs stay")
        }
    };
    Ok(Output {
        text: format!("schedule `{name}` {verb}: {done}\n"),
        json: json!({ "schedule": name, verb: true }),
    })
}

async fn list(rt: &Runtime, wide: bool) -> Result<Output, CliError> {
    let schedules = rt.schedules().await?;
    let when = |t: Option<std::time::SystemTime>| t.map(rfc3339).unwrap_or_else(|| "-".into());
    let rows: Vec<Vec<String>> = schedules
        .iter()
        .map(|s| {
            vec![
                s.name.clone(),
                s.workflow.clone(),
                format!("{} ({})", s.cron, s.timezone),
                if s.paused { "paused" } else { "active" }.to_owned(),
                when(s.last_tick),
                when(s.next_tick),
                s.last_run.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    let text = if rows.is_empty() {
        "no schedules\n".to_owned()
    } else {
        table(
            &[
                Column::whole("NAME"),
                Column::capped("WORKFLOW", 32),
                Column::capped("CRON", 40),
                Column::whole("STATE"),
                Column::whole("LAST TICK"),
                Column::whole("NEXT TICK"),
                Column::whole("LAST RUN"),
            ],
            &rows,
            wide,
        )
    };
    let json: Vec<Value> = schedules.iter().map(schedule_json).collect();
    Ok(Output {
        text,
        json: Value::Array(json),
    })
}
