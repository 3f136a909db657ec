//! A converted call whose JSON members are not written yet: each is written only where the part
//! goes. Into strings of its own for a [`CallPart`] ([`LazyPart::into_part`]: the store, and
//! any part to redact), or straight into a Kafka record's bytes
//! ([`crate::record::append_lazy`]). Writing each member into a string, copying that into the
//! record and freeing it was ~7% of the ingest role's CPU (docs/benchmarks.md, "Members
//! written into their record").

use crate::ProjectId;
use crate::calls::{CallPart, EndPart, OtelDump, StartPart};
use crate::error::Result;
use crate::limits;
use crate::member::write::{Emit, Text};
use crate::time::Micros;

/// About what a part's fields other than its members take: ids, names, times, field headers.
const OTHER_FIELDS: usize = 256;

/// A JSON member to write: what writes it, about how long it is, and whether it must be checked
/// against the nesting bound once written.
pub struct LazyMember<'e> {
    /// Its name, for the error when it nests too deep.
    pub what: &'static str,
    pub value: &'e dyn Emit,
    /// About how many bytes it takes, to size what it is written into.
    pub size: usize,
    /// Its values are shallow enough that it cannot nest past [`limits::MAX_MEMBER_DEPTH`]: it
    /// is not scanned once written.
    pub bounded: bool,
}

impl LazyMember<'_> {
    /// Writes it at the end of `out`; an error when it nests too deep to read back (what was
    /// written is then the caller's to drop).
    pub fn write(&self, out: &mut Text) -> Result<()> {
        self.value.emit(out);
        if !self.bounded {
            limits::check_written_depth(self.what, out.as_str())?;
        }
        Ok(())
    }

    fn to_text(&self) -> Result<String> {
        self.written().map(Text::into_string)
    }

    fn written(&self) -> Result<Text> {
        let mut out = Text::with_capacity(self.size);
        self.write(&mut out)?;
        Ok(out)
    }

    /// Written as an `otel_dump`, with the place of its resource when it marked one.
    fn to_dump(&self) -> Result<OtelDump> {
        let out = self.written()?;
        let resource = out.marked();
        Ok(OtelDump::with_resource(out.into_string(), resource))
    }
}

/// A [`StartPart`] with its members unwritten.
pub struct LazyStart<'e> {
    pub op_name: &'e str,
    pub display_name: Option<&'e str>,
    pub parent_id: Option<&'e str>,
    pub thread_id: Option<&'e str>,
    pub turn_id: Option<&'e str>,
    pub started_at: Micros,
    pub attributes: LazyMember<'e>,
    pub inputs: LazyMember<'e>,
    pub otel_dump: Option<LazyMember<'e>>,
    pub wb_user_id: Option<&'e str>,
    pub wb_run_id: Option<&'e str>,
    pub wb_run_step: Option<i64>,
}

/// An [`EndPart`] with its members unwritten.
pub struct LazyEnd<'e> {
    pub ended_at: Micros,
    pub summary: LazyMember<'e>,
    pub output: Option<LazyMember<'e>>,
    pub exception: Option<&'e str>,
    pub wb_run_step_end: Option<i64>,
}

/// A complete call (a start and an end), its members unwritten.
pub struct LazyPart<'e> {
    pub project: &'e ProjectId,
    pub id: &'e str,
    pub trace_id: &'e str,
    pub start: LazyStart<'e>,
    pub end: LazyEnd<'e>,
}

impl LazyPart<'_> {
    /// The part with each member written into a string of its own.
    pub fn into_part(&self) -> Result<CallPart> {
        let owned = |s: Option<&str>| s.map(str::to_owned);
        let (s, e) = (&self.start, &self.end);
        Ok(CallPart {
            project: self.project.clone(),
            id: self.id.to_owned(),
            trace_id: Some(self.trace_id.to_owned()),
            start: Some(StartPart {
                op_name: s.op_name.to_owned(),
                display_name: owned(s.display_name),
                parent_id: owned(s.parent_id),
                thread_id: owned(s.thread_id),
                turn_id: owned(s.turn_id),
                started_at: s.started_at,
                attributes: s.attributes.to_text()?,
                inputs: s.inputs.to_text()?,
                otel_dump: s.otel_dump.as_ref().map(LazyMember::to_dump).transpose()?,
                wb_user_id: owned(s.wb_user_id),
                wb_run_id: owned(s.wb_run_id),
                wb_run_step: s.wb_run_step,
            }),
            end: Some(EndPart {
                ended_at: e.ended_at,
                summary: e.summary.to_text()?,
                output: e.output.as_ref().map(LazyMember::to_text).transpose()?,
                exception: owned(e.exception),
                wb_run_step_end: e.wb_run_step_end,
                display_name: None,
            }),
        })
    }

    /// About how many bytes it takes encoded: its members, and a guess at its other fields.
    pub fn size(&self) -> usize {
        let (s, e) = (&self.start, &self.end);
        let members = [Some(&s.attributes), Some(&s.inputs), s.otel_dump.as_ref()]
            .into_iter()
            .chain([Some(&e.summary), e.output.as_ref()]);
        members.flatten().map(|m| m.size).sum::<usize>() + OTHER_FIELDS
    }
}
