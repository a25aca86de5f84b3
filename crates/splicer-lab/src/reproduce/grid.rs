//! An experiment's grid: named axes whose values are crossed into points, the first axis
//! outermost. Each point becomes one variant of the generated scenario; `splicer-lab run`
//! then runs every variant once per round, in this order, so the points compared with each
//! other (the innermost axis, e.g. the relays) run next to each other in time.

/// One axis: a name and its values, as they appear in variant names.
#[derive(Debug, Clone)]
pub struct Axis {
    pub name: &'static str,
    pub values: Vec<String>,
}

impl Axis {
    pub fn new<T: ToString>(name: &'static str, values: impl IntoIterator<Item = T>) -> Axis {
        Axis {
            name,
            values: values.into_iter().map(|v| v.to_string()).collect(),
        }
    }
}

/// One point of a grid: a value per axis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Point(Vec<(&'static str, String)>);

impl Point {
    /// The value of `axis` (panics on an axis the grid does not have: a bug in the caller).
    pub fn get(&self, axis: &str) -> &str {
        self.0
            .iter()
            .find(|(n, _)| *n == axis)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("no axis {axis:?} in {self:?}"))
    }

    /// The variant name: the values joined with dots, innermost axis first (`copy.c10`).
    pub fn name(&self) -> String {
        let mut v: Vec<&str> = self.0.iter().map(|(_, v)| v.as_str()).collect();
        v.reverse();
        v.join(".")
    }

    /// The same point with `axis` set to `value`: e.g. the baseline relay of a point.
    pub fn with(&self, axis: &str, value: &str) -> Point {
        let mut p = self.clone();
        for (n, v) in &mut p.0 {
            if *n == axis {
                *v = value.to_string();
            }
        }
        p
    }
}

/// Every point of the grid, the first axis outermost.
pub fn expand(axes: &[Axis]) -> Vec<Point> {
    let mut points = vec![Point(Vec::new())];
    for a in axes {
        points = points
            .into_iter()
            .flat_map(|p| {
                a.values.iter().map(move |v| {
                    let mut q = p.clone();
                    q.0.push((a.name, v.clone()));
                    q
                })
            })
            .collect();
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crosses_the_axes_first_outermost() {
        let g = expand(&[
            Axis::new("conns", ["c1", "c10"]),
            Axis::new("relay", ["forward", "copy", "pipe"]),
        ]);
        let names: Vec<String> = g.iter().map(Point::name).collect();
        assert_eq!(
            names,
            [
                "forward.c1",
                "copy.c1",
                "pipe.c1",
                "forward.c10",
                "copy.c10",
                "pipe.c10"
            ]
        );
        assert_eq!(g[4].get("conns"), "c10");
        assert_eq!(g[4].with("relay", "forward").name(), "forward.c10");
        assert_eq!(expand(&[]).len(), 1);
        assert!(expand(&[Axis::new("x", Vec::<String>::new())]).is_empty());
    }
}
