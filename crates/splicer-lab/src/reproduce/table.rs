//! Markdown tables for the reports, and the row that sets a paper's figure beside ours.

/// A Markdown table.
pub struct Table {
    head: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<S: ToString>(head: impl IntoIterator<Item = S>) -> Table {
        Table {
            head: head.into_iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row<S: ToString>(&mut self, cells: impl IntoIterator<Item = S>) {
        let mut r: Vec<String> = cells.into_iter().map(|c| c.to_string()).collect();
        r.resize(self.head.len(), String::new());
        self.rows.push(r);
    }

    pub fn markdown(&self) -> String {
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        let mut s = line(&self.head);
        s += &line(&vec!["---".to_string(); self.head.len()]);
        for r in &self.rows {
            s += &line(r);
        }
        s
    }
}

/// `x` with `digits` decimals, or `–` when it is not a number.
pub fn num(x: f64, digits: usize) -> String {
    if x.is_finite() {
        format!("{x:.digits$}")
    } else {
        "–".into()
    }
}

/// `ours / paper` as `1.23×`, or `–`.
pub fn ratio(ours: f64, paper: f64) -> String {
    if paper != 0.0 && ours.is_finite() && paper.is_finite() {
        format!("{:.2}×", ours / paper)
    } else {
        "–".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_has_its_head_rule_and_rows() {
        let mut t = Table::new(["relay", "Mbit/s"]);
        t.row(["copy", "512"]);
        t.row(["pipe"]);
        assert_eq!(
            t.markdown(),
            "| relay | Mbit/s |\n| --- | --- |\n| copy | 512 |\n| pipe |  |\n"
        );
        assert_eq!(num(f64::NAN, 1), "–");
        assert_eq!(ratio(2.0, 4.0), "0.50×");
        assert_eq!(ratio(2.0, 0.0), "–");
    }
}
