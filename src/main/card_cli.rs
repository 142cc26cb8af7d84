//! `warden machine card ID [RUN]`: a run's card (docs/run-card.md), built
//! from the machine's audit log as `warden machine audit` reads it
//! (through its warden while it runs, from its volume or disk when it is
//! stopped), as text, one JSON object or a self-contained HTML page.

use crate::error::CliError;
use serde_json::Value;
use warden::host::machine as m;
use warden::shared::spend::{card, card_render};

#[derive(clap::Args)]
pub struct CardArgs {
    /// The machine's id.
    id: String,
    /// The run [default: the last one that began].
    run: Option<String>,
    /// The card as one JSON object (as the API's `card` answers it).
    #[arg(long, conflicts_with = "html")]
    json: bool,
    /// The card as one self-contained HTML page, with a timeline of the
    /// run (no script, nothing fetched from outside it).
    #[arg(long)]
    html: bool,
}

pub fn run(args: CardArgs) -> Result<i32, CliError> {
    m::check_id(&args.id)?;
    let lines = read_log(&args.id)?;
    let run = match args.run {
        Some(run) => run,
        None => last_run(&lines).ok_or_else(|| CliError::NoRun(args.id.clone()))?,
    };
    let card = card::build(&lines, &run).map_err(CliError::Card)?;
    let out = match (args.json, args.html) {
        (true, _) => serde_json::to_string_pretty(&card)? + "\n",
        (_, true) => card_render::html(&card),
        _ => card_render::text(&card),
    };
    print!("{out}");
    Ok(0)
}

/// The name of the last run that began in the log.
pub fn last_run(lines: &[Value]) -> Option<String> {
    lines
        .iter()
        .rev()
        .find(|l| l["kind"] == "run_begin")
        .and_then(|l| l["run"].as_str())
        .map(str::to_string)
}

/// The log's lines, in chain order (a line that is not JSON, such as a
/// last one cut short, is left out).
fn read_log(id: &str) -> Result<Vec<Value>, CliError> {
    let parse = |text: &str| -> Vec<Value> {
        text.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    // A machine that answers is read through its warden, into memory:
    // what is printed is the card alone.
    if let Ok(mut client) = m::connect(id, None) {
        if client.version >= 5 {
            let mut bytes = Vec::new();
            client
                .read_audit(1, &mut bytes)
                .map_err(CliError::ReadAudit)?;
            return Ok(parse(&String::from_utf8_lossy(&bytes)));
        }
    }
    let (files, _anchor) = m::copy_audit(id)?;
    let mut lines = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(|source| CliError::File {
            path: file.clone(),
            source,
        })?;
        lines.extend(parse(&text));
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_default_run_is_the_last_that_began() {
        let lines = [
            json!({"kind": "run_begin", "run": "a"}),
            json!({"kind": "run_begin", "run": "b"}),
            json!({"kind": "run_end", "run": "b"}),
            json!({"kind": "command_start", "run": "c"}),
        ];
        assert_eq!(last_run(&lines).as_deref(), Some("b"));
        assert_eq!(last_run(&lines[3..]), None);
    }

    #[test]
    fn the_command_line_takes_a_machine_a_run_and_one_form() {
        let parse = |args: &[&str]| {
            let mut all = vec!["warden", "machine", "card"];
            all.extend(args);
            crate::parse_from(all.into_iter().map(Into::into).collect())
        };
        let card = |args: &[&str]| match parse(args).map(|cli| cli.command) {
            Ok(crate::Command::Machine {
                action: crate::MachineAction::Card(a),
            }) => Some((a.id, a.run, a.json, a.html)),
            _ => None,
        };
        assert_eq!(card(&["demo"]), Some(("demo".into(), None, false, false)));
        assert_eq!(
            card(&["demo", "job-41", "--html"]),
            Some(("demo".into(), Some("job-41".into()), false, true))
        );
        assert_eq!(
            card(&["demo", "--json"]),
            Some(("demo".into(), None, true, false))
        );
        assert!(parse(&["demo", "--json", "--html"]).is_err());
        assert!(parse(&[]).is_err());
    }
}
