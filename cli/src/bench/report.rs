//! The benchmark's figures, and their ratios to the floor (one Redis round trip) of the run.

use serde_json::{Value, json};

/// One measured figure.
#[derive(Debug, Clone)]
pub struct Figure {
    /// What was measured, e.g. `uncontended N=5 acquire p50`.
    pub name: String,
    /// The value, in `unit`.
    pub value: f64,
    /// `µs`, `pairs/s`, `sections/s`, `share`, `count`.
    pub unit: &'static str,
    /// For latencies: value ÷ the floor round trip. For rates: value ÷ the floor's rate (one
    /// round trip after another). `None` where a ratio means nothing (fairness, counts).
    pub ratio: Option<f64>,
}

impl Figure {
    /// The figure as one JSON object (a line of the JSON-lines output).
    pub fn to_json(&self) -> Value {
        json!({"name": self.name, "value": self.value, "unit": self.unit, "ratio_to_floor": self.ratio})
    }
}

/// How a figure relates to the floor.
#[derive(Clone, Copy)]
enum Scale {
    Latency,
    Rate,
    Plain,
}

/// Collects figures; their ratios are worked out at the end, against the floor of the whole run.
#[derive(Default)]
pub(super) struct Report {
    figures: Vec<(Figure, Scale)>,
}

impl Report {
    fn push(&mut self, name: impl Into<String>, value: f64, unit: &'static str, scale: Scale) {
        let figure = Figure {
            name: name.into(),
            value,
            unit,
            ratio: None,
        };
        self.figures.push((figure, scale));
    }

    pub(super) fn latency(&mut self, name: impl Into<String>, us: f64) {
        self.push(name, us, "µs", Scale::Latency);
    }

    pub(super) fn rate(&mut self, name: impl Into<String>, per_second: f64, unit: &'static str) {
        self.push(name, per_second, unit, Scale::Rate);
    }

    pub(super) fn plain(&mut self, name: impl Into<String>, value: f64, unit: &'static str) {
        self.push(name, value, unit, Scale::Plain);
    }

    /// The figures with their ratios to `floor_us`.
    pub(super) fn finish(self, floor_us: f64) -> Vec<Figure> {
        self.figures
            .into_iter()
            .map(|(mut figure, scale)| {
                figure.ratio = match scale {
                    Scale::Latency => Some(figure.value / floor_us),
                    Scale::Rate => Some(figure.value * floor_us / 1e6),
                    Scale::Plain => None,
                };
                figure
            })
            .collect()
    }
}
