//! Project settings that act on the data (docs/api/project-settings.md): retention (TTL),
//! server-side redaction of sensitive data, and ingest sampling. The request and response bodies
//! of their routes, and [`ProjectSettings`], what the store keeps per project.

use serde::{Deserialize, Serialize};

use crate::ProtoError;
use crate::ids::ProjectId;
use crate::time::Micros;

/// The longest retention accepted: 100 years. Longer is "keep forever", which is `None`.
pub const MAX_RETENTION_DAYS: i64 = 36_500;

const MICROS_PER_DAY: i64 = 86_400 * 1_000_000;

/// The sensitive-data policy: `off`, or `pii-v1` (the redaction rule of
/// `heddle_domain::redaction`, applied at ingest before anything is stored).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SensitiveDataPolicy {
    #[default]
    #[serde(rename = "off")]
    Off,
    #[serde(rename = "pii-v1")]
    PiiV1,
}

impl SensitiveDataPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            SensitiveDataPolicy::Off => "off",
            SensitiveDataPolicy::PiiV1 => "pii-v1",
        }
    }

    pub fn parse(s: &str) -> Option<SensitiveDataPolicy> {
        match s {
            "off" => Some(SensitiveDataPolicy::Off),
            "pii-v1" => Some(SensitiveDataPolicy::PiiV1),
            _ => None,
        }
    }
}

/// Ingest sampling: the share of traces kept (`sample_rate`, 0 to 1), decided per trace id. In
/// a dry run every trace is kept and only counted as kept or dropped.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    pub sample_rate: f64,
    pub dry_run: bool,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling { sample_rate: 1.0, dry_run: false }
    }
}

/// Every setting of one project; [`Default`] is what a project never configured has.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProjectSettings {
    /// Days calls, feedback and unreferenced files are kept; `None` keeps them forever.
    pub retention_days: Option<i64>,
    pub sensitive_data: SensitiveDataPolicy,
    pub sampling: Sampling,
}

impl ProjectSettings {
    /// When data written at `at` expires under this project's retention, if it does.
    pub fn expire_at(&self, at: Micros) -> Option<Micros> {
        self.retention_days.map(|d| Micros(at.0.saturating_add(d * MICROS_PER_DAY)))
    }
}

/// The oldest time data may have at `now` and still be kept for `days` (a purge removes what is
/// older).
pub fn retention_cutoff(now: Micros, days: i64) -> Micros {
    Micros(now.0.saturating_sub(days.saturating_mul(MICROS_PER_DAY)))
}

/// One setting, as an update writes it: each is stored on its own, so concurrent updates of
/// different settings never undo each other.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ProjectSetting {
    Retention(Option<i64>),
    SensitiveData(SensitiveDataPolicy),
    Sampling(Sampling),
}

impl ProjectSetting {
    /// The setting's name in storage.
    pub fn name(&self) -> &'static str {
        match self {
            ProjectSetting::Retention(_) => "retention_days",
            ProjectSetting::SensitiveData(_) => "sensitive_data",
            ProjectSetting::Sampling(_) => "ingest_sampling",
        }
    }

    /// The setting's value in storage: JSON text.
    pub fn value_json(&self) -> String {
        let v = match self {
            ProjectSetting::Retention(days) => serde_json::json!(days),
            ProjectSetting::SensitiveData(p) => serde_json::json!(p.as_str()),
            ProjectSetting::Sampling(s) => serde_json::json!(s),
        };
        v.to_string()
    }

    /// Applies a stored `(name, value)` to `settings`. Unknown names (from a newer heddle) and
    /// values that no longer parse are ignored: the setting keeps its default.
    pub fn apply_stored(settings: &mut ProjectSettings, name: &str, value: &str) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(value) else { return };
        match name {
            "retention_days" => {
                if v.is_null() {
                    settings.retention_days = None;
                } else if let Some(d) = v.as_i64().filter(|d| (1..=MAX_RETENTION_DAYS).contains(d))
                {
                    settings.retention_days = Some(d);
                }
            }
            "sensitive_data" => {
                if let Some(p) = v.as_str().and_then(SensitiveDataPolicy::parse) {
                    settings.sensitive_data = p;
                }
            }
            "ingest_sampling" => {
                if let Ok(s) = serde_json::from_value::<Sampling>(v)
                    && check_rate(s.sample_rate).is_ok()
                {
                    settings.sampling = s;
                }
            }
            _ => {}
        }
    }
}

fn check_rate(rate: f64) -> Result<(), ProtoError> {
    if rate.is_finite() && (0.0..=1.0).contains(&rate) {
        Ok(())
    } else {
        Err(ProtoError::invalid(format!("sample_rate must be between 0 and 1, got {rate}")))
    }
}

// ---------------------------------------------------------------------------------------------
// Requests and responses

/// The body of every read: `/project/ttl_settings/read`,
/// `/project/ingest_sampling_settings/read` (and the query string of
/// `GET /project/sensitive_data_settings`).
#[derive(Debug, Deserialize)]
pub struct SettingsReadReq {
    pub project_id: ProjectId,
}

/// `/project/ttl_settings/update`. `retention_days` absent or null disables the TTL.
#[derive(Debug, Deserialize)]
pub struct TtlUpdateReq {
    pub project_id: ProjectId,
    #[serde(default)]
    pub retention_days: Option<i64>,
    /// Sent by the SDK; the acting user is the API key's.
    #[serde(default)]
    pub wb_user_id: Option<String>,
}

impl TtlUpdateReq {
    pub fn setting(&self) -> Result<ProjectSetting, ProtoError> {
        match self.retention_days {
            Some(d) if !(1..=MAX_RETENTION_DAYS).contains(&d) => Err(ProtoError::invalid(format!(
                "retention_days must be null (keep forever) or between 1 and \
                 {MAX_RETENTION_DAYS}, got {d}"
            ))),
            days => Ok(ProjectSetting::Retention(days)),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct TtlRes {
    pub retention_days: Option<i64>,
}

/// `/project/sensitive_data_settings/update`.
#[derive(Debug, Deserialize)]
pub struct SensitiveDataUpdateReq {
    pub project_id: ProjectId,
    pub policy: String,
}

impl SensitiveDataUpdateReq {
    pub fn policy(&self) -> Result<SensitiveDataPolicy, ProtoError> {
        SensitiveDataPolicy::parse(&self.policy).ok_or_else(|| {
            ProtoError::invalid(format!(
                "policy must be \"off\" or \"pii-v1\", got {:?}",
                self.policy
            ))
        })
    }
}

#[derive(Debug, Serialize)]
pub struct SensitiveDataRes {
    pub policy: SensitiveDataPolicy,
}

/// `/project/ingest_sampling_settings/update`: the members sent replace the current ones.
#[derive(Debug, Deserialize)]
pub struct SamplingUpdateReq {
    pub project_id: ProjectId,
    #[serde(default)]
    pub sample_rate: Option<f64>,
    #[serde(default)]
    pub dry_run: Option<bool>,
}

impl SamplingUpdateReq {
    /// The new sampling, from `current` and the members sent.
    pub fn sampling(&self, current: Sampling) -> Result<Sampling, ProtoError> {
        let rate = self.sample_rate.unwrap_or(current.sample_rate);
        check_rate(rate)?;
        let dry_run = self.dry_run.unwrap_or(current.dry_run);
        Ok(Sampling { sample_rate: rate, dry_run })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_settings_round_trip_and_bad_values_keep_defaults() {
        let mut s = ProjectSettings::default();
        for set in [
            ProjectSetting::Retention(Some(30)),
            ProjectSetting::SensitiveData(SensitiveDataPolicy::PiiV1),
            ProjectSetting::Sampling(Sampling { sample_rate: 0.25, dry_run: true }),
        ] {
            ProjectSetting::apply_stored(&mut s, set.name(), &set.value_json());
        }
        assert_eq!(s.retention_days, Some(30));
        assert_eq!(s.sensitive_data, SensitiveDataPolicy::PiiV1);
        assert_eq!(s.sampling, Sampling { sample_rate: 0.25, dry_run: true });
        ProjectSetting::apply_stored(&mut s, "retention_days", "null");
        assert_eq!(s.retention_days, None);

        let mut d = ProjectSettings::default();
        for (name, value) in [
            ("retention_days", "0"),
            ("retention_days", "\"7\""),
            ("sensitive_data", "\"pii-v9\""),
            ("ingest_sampling", r#"{"sample_rate": 2, "dry_run": false}"#),
            ("no_such_setting", "1"),
            ("retention_days", "not json"),
        ] {
            ProjectSetting::apply_stored(&mut d, name, value);
        }
        assert_eq!(d, ProjectSettings::default());
    }

    #[test]
    fn updates_are_bounded() {
        let p = ProjectId::parse("e/p").unwrap();
        let ttl = |d| TtlUpdateReq { project_id: p.clone(), retention_days: d, wb_user_id: None };
        assert_eq!(ttl(None).setting().unwrap(), ProjectSetting::Retention(None));
        assert_eq!(ttl(Some(1)).setting().unwrap(), ProjectSetting::Retention(Some(1)));
        for bad in [0, -1, MAX_RETENTION_DAYS + 1, i64::MAX] {
            assert!(ttl(Some(bad)).setting().is_err(), "{bad}");
        }
        let rate = |r| SamplingUpdateReq { project_id: p.clone(), sample_rate: r, dry_run: None };
        let current = Sampling { sample_rate: 0.5, dry_run: true };
        assert_eq!(
            rate(Some(0.0)).sampling(current).unwrap(),
            Sampling { sample_rate: 0.0, dry_run: true }
        );
        assert_eq!(rate(None).sampling(current).unwrap(), current);
        for bad in [-0.1, 1.01, f64::NAN, f64::INFINITY] {
            assert!(rate(Some(bad)).sampling(current).is_err(), "{bad}");
        }
        let policy = |s: &str| SensitiveDataUpdateReq { project_id: p.clone(), policy: s.into() };
        assert_eq!(policy("pii-v1").policy().unwrap(), SensitiveDataPolicy::PiiV1);
        assert!(policy("PII").policy().is_err());
    }

    #[test]
    fn expiry_and_cutoff() {
        let s = ProjectSettings { retention_days: Some(2), ..Default::default() };
        assert_eq!(s.expire_at(Micros(0)), Some(Micros(2 * MICROS_PER_DAY)));
        assert_eq!(ProjectSettings::default().expire_at(Micros(5)), None);
        assert_eq!(retention_cutoff(Micros(3 * MICROS_PER_DAY), 2), Micros(MICROS_PER_DAY));
    }
}
