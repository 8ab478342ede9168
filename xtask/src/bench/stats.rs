//! Medians and spreads: the shared host makes single runs noisy, so tables quote
//! the median of the repeats and their range.
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

pub fn summarize(values: &[f64]) -> Option<Summary> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    let median = if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    };
    Some(Summary {
        median,
        min: v[0],
        max: v[v.len() - 1],
        n: v.len(),
    })
}

impl Summary {
    /// `1.23 (0.98-1.50)` with the values scaled by `scale`; only the median for a single run.
    pub fn show(&self, scale: f64, decimals: usize) -> String {
        if self.n == 1 {
            format!("{:.*}", decimals, self.median * scale)
        } else {
            format!(
                "{:.*} ({:.*}-{:.*})",
                decimals,
                self.median * scale,
                decimals,
                self.min * scale,
                decimals,
                self.max * scale
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(summarize(&[3.0, 1.0, 2.0]).unwrap().median, 2.0);
        let s = summarize(&[4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (2.5, 1.0, 4.0, 4));
        assert!(summarize(&[]).is_none());
    }
}
