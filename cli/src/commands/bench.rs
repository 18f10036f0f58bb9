//! `redquorum bench`: run the benchmark, print a table, write JSON lines.

use std::io::Write;
use std::path::PathBuf;

use redquorum_cli::bench::{BenchOptions, Figure, floor_warning};

use super::out::say;
use super::stop::stop_requested;
use super::{EXIT_OK, EXIT_SOFTWARE};

pub(super) async fn run(opts: BenchOptions, json: PathBuf) -> u8 {
    let mut bench = tokio::spawn(async move { redquorum_cli::bench::run(&opts).await });
    let joined = tokio::select! {
        joined = &mut bench => joined,
        stop = stop_requested() => {
            // The benchmark owns the masters it started: once its task is gone, so are they.
            // A process that just exited would leave them running.
            bench.abort();
            let _ = bench.await;
            tracing::error!("{}: the benchmark and the masters it started were stopped", stop.name());
            return stop.exit_code();
        }
    };
    let figures = match joined {
        Ok(Ok(f)) => f,
        Ok(Err(e)) => {
            tracing::error!("the benchmark failed: {e}");
            return EXIT_SOFTWARE;
        }
        Err(e) => {
            tracing::error!("the benchmark failed: {e}");
            return EXIT_SOFTWARE;
        }
    };
    let written = say!("{}", table(&figures)).and_then(|()| match floor_warning(&figures) {
        Some(warning) => say!("{warning}\n"),
        None => Ok(()),
    });
    if let Err(e) = write_json(&figures, &json) {
        tracing::error!("cannot write {}: {e}", json.display());
        return EXIT_SOFTWARE;
    }
    if let Err(e) = written.and_then(|()| say!("JSON lines: {}", json.display())) {
        tracing::error!("{e}");
        return EXIT_SOFTWARE;
    }
    let violations = figures
        .iter()
        .find(|f| f.name.starts_with("mutual-exclusion"))
        .map_or(0.0, |f| f.value);
    if violations > 0.0 {
        tracing::error!("{violations} mutual-exclusion violations");
        return EXIT_SOFTWARE;
    }
    EXIT_OK
}

/// A Markdown table: figure, value, ratio to the floor.
fn table(figures: &[Figure]) -> String {
    let mut out = String::from("| figure | value | ratio to floor |\n| --- | ---: | ---: |\n");
    for f in figures {
        let value = match f.unit {
            "µs" => format!("{:.1} µs", f.value),
            // Three places: the HTTP goal is a share of 0.7, and 0.696 printed as 0.70 reads as met.
            "share" => format!("{:.3}", f.value),
            "count" => format!("{}", f.value),
            unit => format!("{:.0} {unit}", f.value),
        };
        let ratio = f.ratio.map_or_else(String::new, |r| match f.unit {
            "µs" => format!("{r:.2} × RTT"),
            _ => format!("{r:.2} per RTT"),
        });
        out.push_str(&format!("| {} | {value} | {ratio} |\n", f.name));
    }
    out
}

fn write_json(figures: &[Figure], path: &PathBuf) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut file = std::fs::File::create(path)?;
    for f in figures {
        writeln!(file, "{}", f.to_json())?;
    }
    Ok(())
}
