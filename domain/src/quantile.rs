//! Quantiles of samples, one rule for every statistic heddle reports (thread turn durations,
//! `/calls/stats`, the agents' span stats, the web UI's latency charts).

/// The `q`-th quantile (0..=1) of `sorted`, interpolated linearly between the closest ranks
/// (numpy's default); `None` for no samples.
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    let (first, last) = (*sorted.first()?, *sorted.last()?);
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    let v = sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64);
    Some(v.clamp(first, last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate() {
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile(&[100.0], 0.99), Some(100.0));
        assert_eq!(quantile(&[100.0, 200.0], 0.5), Some(150.0));
        assert_eq!(quantile(&[100.0, 200.0, 400.0], 0.99), Some(396.0));
    }
}
