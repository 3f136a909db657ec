//! Statements of the writer that bind text without copying it.
//!
//! rusqlite binds every text with `SQLITE_TRANSIENT`: SQLite allocates a copy of each value, the
//! insert copies it again into the row's record, and the first copy is freed. The calls upsert's
//! members are most of a call's bytes; binding them in place took ~4% off the writer thread's
//! CPU per call, and more per span (docs/benchmarks.md, "Text bound in place"). The writer thread
//! bounds the store's throughput, so its time is the one that counts.
//!
//! Binding with `SQLITE_STATIC` lets SQLite read the caller's text where it lies. That is sound
//! only while the text outlives the binding, so a [`Statements::execute`] binds, steps and clears
//! the bindings within one call that borrows its parameters, and the statements themselves are
//! finalized before their connection closes ([`Statements`] is owned next to the connection by
//! [`super::writer`]).

use std::cell::RefCell;
use std::ffi::{CStr, c_int};
use std::ptr::{self, NonNull};

use rusqlite::{Connection, ffi};

/// One parameter of a statement, borrowed for the length of one [`Statements::execute`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Param<'a> {
    Null,
    Int(i64),
    Text(&'a str),
}

impl<'a> From<Option<&'a str>> for Param<'a> {
    fn from(v: Option<&'a str>) -> Self {
        v.map_or(Param::Null, Param::Text)
    }
}

impl<'a> From<&'a str> for Param<'a> {
    fn from(v: &'a str) -> Self {
        Param::Text(v)
    }
}

impl From<Option<i64>> for Param<'_> {
    fn from(v: Option<i64>) -> Self {
        v.map_or(Param::Null, Param::Int)
    }
}

/// The writer's prepared statements, keyed by their SQL text (a `'static` constant, compared by
/// address). Prepared on first use and kept for the connection's life.
pub(crate) struct Statements {
    db: *mut ffi::sqlite3,
    prepared: RefCell<Vec<(&'static str, Prepared)>>,
}

impl Statements {
    /// Statements for `conn`. The caller must drop them before `conn` closes: the writer keeps
    /// both in one struct, statements first.
    pub fn new(conn: &Connection) -> Statements {
        // SAFETY: the handle is only compared and passed back to SQLite while `conn` is open.
        Statements { db: unsafe { conn.handle() }, prepared: RefCell::new(Vec::new()) }
    }

    /// Runs `sql` with `params` on `conn` and returns the number of rows it changed. `sql` must
    /// not return rows, and must take exactly `params.len()` parameters.
    pub fn execute(
        &self,
        conn: &Connection,
        sql: &'static str,
        params: &[Param<'_>],
    ) -> rusqlite::Result<u64> {
        // SAFETY: only compared with the handle the statements were prepared on.
        if unsafe { conn.handle() } != self.db {
            return Err(misuse("statement used on another connection"));
        }
        let mut prepared = self.prepared.borrow_mut();
        let index = match prepared.iter().position(|(s, _)| ptr::eq(*s, sql)) {
            Some(i) => i,
            None => {
                prepared.push((sql, Prepared::new(self.db, sql)?));
                prepared.len() - 1
            }
        };
        prepared[index].1.execute(self.db, params)
    }
}

impl Drop for Statements {
    fn drop(&mut self) {
        for (_, p) in self.prepared.get_mut().drain(..) {
            // SAFETY: the connection is still open (see `Statements::new`); nothing uses the
            // statement after this.
            unsafe { ffi::sqlite3_finalize(p.stmt.as_ptr()) };
        }
    }
}

/// A prepared statement; finalized by [`Statements`]' drop.
struct Prepared {
    stmt: NonNull<ffi::sqlite3_stmt>,
    params: usize,
}

impl Prepared {
    fn new(db: *mut ffi::sqlite3, sql: &str) -> rusqlite::Result<Prepared> {
        let mut stmt = ptr::null_mut();
        let len = c_int::try_from(sql.len()).map_err(|_| misuse("statement too long"))?;
        // SAFETY: `db` is open; `sql` is valid for `len` bytes and need not end in a NUL.
        let rc = unsafe {
            ffi::sqlite3_prepare_v3(
                db,
                sql.as_ptr().cast(),
                len,
                ffi::SQLITE_PREPARE_PERSISTENT as _,
                &mut stmt,
                ptr::null_mut(),
            )
        };
        if rc != ffi::SQLITE_OK {
            return Err(error(db, rc));
        }
        let stmt = NonNull::new(stmt).ok_or_else(|| misuse("empty statement"))?;
        // SAFETY: `stmt` was just prepared.
        let params = unsafe { ffi::sqlite3_bind_parameter_count(stmt.as_ptr()) } as usize;
        Ok(Prepared { stmt, params })
    }

    fn execute(&mut self, db: *mut ffi::sqlite3, params: &[Param<'_>]) -> rusqlite::Result<u64> {
        if params.len() != self.params {
            return Err(misuse("wrong number of parameters"));
        }
        // Resets the statement and drops every binding however this call ends, so no pointer
        // into `params` stays behind in SQLite.
        let bound = Bound(self.stmt);
        for (i, p) in params.iter().enumerate() {
            let i = i as c_int + 1;
            let stmt = bound.0.as_ptr();
            // SAFETY: `stmt` is prepared and not running. A text is read in place
            // (`SQLITE_STATIC`) until `bound` clears the bindings, which happens before
            // `params` can go away.
            let rc = unsafe {
                match *p {
                    Param::Null => ffi::sqlite3_bind_null(stmt, i),
                    Param::Int(v) => ffi::sqlite3_bind_int64(stmt, i, v),
                    Param::Text(s) => ffi::sqlite3_bind_text64(
                        stmt,
                        i,
                        s.as_ptr().cast(),
                        s.len() as ffi::sqlite3_uint64,
                        ffi::SQLITE_STATIC(),
                        ffi::SQLITE_UTF8 as _,
                    ),
                }
            };
            if rc != ffi::SQLITE_OK {
                return Err(error(db, rc));
            }
        }
        // SAFETY: every parameter is bound to live data.
        match unsafe { ffi::sqlite3_step(bound.0.as_ptr()) } {
            // SAFETY: `db` is open.
            ffi::SQLITE_DONE => Ok(unsafe { ffi::sqlite3_changes64(db) } as u64),
            ffi::SQLITE_ROW => Err(rusqlite::Error::ExecuteReturnedResults),
            rc => Err(error(db, rc)),
        }
    }
}

/// A statement with bindings in place; reset and cleared on drop.
struct Bound(NonNull<ffi::sqlite3_stmt>);

impl Drop for Bound {
    fn drop(&mut self) {
        // SAFETY: the statement is prepared; reset only ends its run (any error was reported
        // by the step), clearing makes every parameter NULL.
        unsafe {
            ffi::sqlite3_reset(self.0.as_ptr());
            ffi::sqlite3_clear_bindings(self.0.as_ptr());
        }
    }
}

/// The error SQLite reported for `rc` on `db`, with its message.
fn error(db: *mut ffi::sqlite3, rc: c_int) -> rusqlite::Error {
    // SAFETY: `db` is open; the message is copied before the next call on it.
    let message = unsafe {
        let m = ffi::sqlite3_errmsg(db);
        (!m.is_null()).then(|| CStr::from_ptr(m).to_string_lossy().into_owned())
    };
    rusqlite::Error::SqliteFailure(ffi::Error::new(rc), message)
}

fn misuse(message: &str) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(ffi::Error::new(ffi::SQLITE_MISUSE), Some(message.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const INSERT: &str = "INSERT INTO t (a, b) VALUES (?1, ?2)";

    fn table() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (a TEXT UNIQUE, b INTEGER)").unwrap();
        conn
    }

    fn rows(conn: &Connection) -> Vec<(Option<String>, Option<i64>)> {
        let mut st = conn.prepare("SELECT a, b FROM t ORDER BY rowid").unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect()
    }

    #[test]
    fn text_bound_in_place_is_stored_and_the_buffer_may_then_change() {
        let conn = table();
        let statements = Statements::new(&conn);
        let mut text = String::from("one");
        let n = statements.execute(&conn, INSERT, &[Param::Text(&text), Param::Int(1)]).unwrap();
        assert_eq!(n, 1);
        text.clear();
        text.push_str("two");
        statements.execute(&conn, INSERT, &[Param::Text(&text), Param::Null]).unwrap();
        text.clear(); // the stored rows are SQLite's own copies
        statements.execute(&conn, INSERT, &[Param::Text(""), Option::<i64>::None.into()]).unwrap();
        assert_eq!(
            rows(&conn),
            [
                (Some("one".into()), Some(1)),
                (Some("two".into()), None),
                (Some(String::new()), None)
            ]
        );
    }

    #[test]
    fn errors_carry_sqlites_message_and_leave_the_statement_usable() {
        let conn = table();
        let statements = Statements::new(&conn);
        statements.execute(&conn, INSERT, &["a".into(), Param::Int(1)]).unwrap();
        let err = statements.execute(&conn, INSERT, &["a".into(), Param::Int(2)]).unwrap_err();
        assert!(err.to_string().contains("UNIQUE constraint failed: t.a"), "{err}");
        let err = statements.execute(&conn, INSERT, &["b".into()]).unwrap_err();
        assert!(err.to_string().contains("wrong number of parameters"), "{err}");
        statements.execute(&conn, INSERT, &["b".into(), Param::Int(2)]).unwrap();
        assert_eq!(rows(&conn), [(Some("a".into()), Some(1)), (Some("b".into()), Some(2))]);
        let other = table();
        let err = statements.execute(&other, INSERT, &["c".into(), Param::Int(3)]).unwrap_err();
        assert!(err.to_string().contains("another connection"), "{err}");
    }
}
