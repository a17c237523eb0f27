//! The fencing rule in SQL: a table whose rows refuse a write from a holder older than the last one that touched
//! them, tested against SQLite (the `examples` crate's tests run it).
//!
//! Each row carries the highest fence that wrote (or read) it. A write is one `UPDATE … WHERE fence <= $fence`:
//! the database compares and writes in one step, so two holders that both believe they hold cannot interleave
//! between the check and the write. Zero rows updated means a newer holder has been there: the write is refused
//! with [`LockError::StaleFence`], exactly as [`FencedResource`](lock_core::FencedResource) refuses one on Redis.
//!
//! The same statements on PostgreSQL (`$1` placeholders, `RETURNING` to read the row in the same statement):
//!
//! ```sql
//! -- read, recording the fence (no older holder may write what this one read):
//! UPDATE accounts SET fence = $2 WHERE id = $1 AND fence <= $2 RETURNING balance;
//! -- write:
//! UPDATE accounts SET balance = $3, fence = $2 WHERE id = $1 AND fence <= $2;
//! -- zero rows: refused; `SELECT fence FROM accounts WHERE id = $1` says by whom
//! ```
//!
//! and on MySQL (no `RETURNING`: run the read's `UPDATE` then `SELECT balance … FOR UPDATE` in one transaction).
//! Fences are `u64`; SQLite's and PostgreSQL's integers are signed 64-bit, so store them as `BIGINT` and refuse a
//! fence above `i64::MAX` (a fence drawn from the server's clock in microseconds stays below it until the year 294 247).
//!
//! ```
//! use examples::fenced_sql::Accounts;
//! use lock_core::{FencingToken, LockError};
//!
//! let accounts = Accounts::in_memory()?;
//! accounts.open("alice", 100)?;
//! let (old, new) = (FencingToken::new(7), FencingToken::new(8));
//! let balance = accounts.read(new, "alice")?; // the newer holder reads: the row now carries fence 8
//! accounts.write(new, "alice", balance + 5)?;
//! match accounts.write(old, "alice", 0) {
//!     Err(LockError::StaleFence { presented: 7, current: 8 }) => {}
//!     other => panic!("a stale holder wrote: {other:?}"),
//! }
//! assert_eq!(accounts.balance("alice")?, 105);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use lock_core::{FencingToken, LockError, Result};
use rusqlite::{params, Connection, OptionalExtension};

/// Accounts in one SQLite database, each row guarded by its fence.
#[derive(Debug)]
pub struct Accounts {
    db: Connection,
}

fn sql(err: rusqlite::Error) -> LockError {
    LockError::backend(err)
}

/// A fence as the column stores it (SQLite's integers are signed).
fn column(fence: FencingToken) -> Result<i64> {
    i64::try_from(fence.get()).map_err(|_| LockError::invalid("a fence above i64::MAX does not fit a BIGINT column"))
}

impl Accounts {
    /// A fresh in-memory database with the `accounts` table.
    ///
    /// # Errors
    /// [`LockError::Backend`] when SQLite fails.
    pub fn in_memory() -> Result<Self> {
        let db = Connection::open_in_memory().map_err(sql)?;
        db.execute_batch(
            "CREATE TABLE accounts (id TEXT PRIMARY KEY, balance INTEGER NOT NULL, fence INTEGER NOT NULL DEFAULT 0)",
        )
        .map_err(sql)?;
        Ok(Accounts { db })
    }

    /// Opens an account with `balance`, touched by no holder yet (fence 0).
    ///
    /// # Errors
    /// [`LockError::Backend`] when SQLite fails (an account that exists).
    pub fn open(&self, id: &str, balance: i64) -> Result<()> {
        self.db.execute("INSERT INTO accounts (id, balance) VALUES (?1, ?2)", params![id, balance]).map_err(sql)?;
        Ok(())
    }

    /// The balance, recording `fence` on the row in the same statement: from then on no older holder can change
    /// what this one read.
    ///
    /// # Errors
    /// [`LockError::StaleFence`] when a newer holder has touched the row; [`LockError::InvalidArgument`] for an
    /// unknown account or a fence above `i64::MAX`; [`LockError::Backend`] when SQLite fails.
    pub fn read(&self, fence: FencingToken, id: &str) -> Result<i64> {
        let result = self.read_unrecorded(fence, id);
        // One call: a refusal is a `warn` event naming both fences, and every outcome is counted
        // (`lock_fenced_writes_total`), as `FencedResource` records its own.
        lock_core::telemetry::fenced_write("accounts", "sql_read", &result);
        result
    }

    fn read_unrecorded(&self, fence: FencingToken, id: &str) -> Result<i64> {
        let f = column(fence)?;
        let read = self
            .db
            .query_row(
                "UPDATE accounts SET fence = ?2 WHERE id = ?1 AND fence <= ?2 RETURNING balance",
                params![id, f],
                |row| row.get(0),
            )
            .optional()
            .map_err(sql)?;
        read.map_or_else(|| Err(self.refusal(fence, id)), Ok)
    }

    /// Sets the balance, if `fence` is not older than the row's.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub fn write(&self, fence: FencingToken, id: &str, balance: i64) -> Result<()> {
        let result = self.write_unrecorded(fence, id, balance);
        lock_core::telemetry::fenced_write("accounts", "sql_update", &result);
        result
    }

    fn write_unrecorded(&self, fence: FencingToken, id: &str, balance: i64) -> Result<()> {
        let f = column(fence)?;
        let updated = self
            .db
            .execute(
                "UPDATE accounts SET balance = ?3, fence = ?2 WHERE id = ?1 AND fence <= ?2",
                params![id, f, balance],
            )
            .map_err(sql)?;
        if updated == 0 {
            return Err(self.refusal(fence, id));
        }
        Ok(())
    }

    /// Sets the balance with no fence: what an application that ignores fencing does. The tests show it losing
    /// updates to a holder that paused past its lease; use [`write`](Self::write).
    ///
    /// # Errors
    /// [`LockError::Backend`] when SQLite fails.
    pub fn write_unfenced(&self, id: &str, balance: i64) -> Result<()> {
        self.db.execute("UPDATE accounts SET balance = ?2 WHERE id = ?1", params![id, balance]).map_err(sql)?;
        Ok(())
    }

    /// The balance, without a fence (for reports and tests).
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for an unknown account; [`LockError::Backend`] when SQLite fails.
    pub fn balance(&self, id: &str) -> Result<i64> {
        let balance = self
            .db
            .query_row("SELECT balance FROM accounts WHERE id = ?1", params![id], |row| row.get(0))
            .optional()
            .map_err(sql)?;
        balance.ok_or_else(|| LockError::invalid(format!("no account {id:?}")))
    }

    /// Why zero rows changed: a newer fence on the row, or no such row.
    fn refusal(&self, fence: FencingToken, id: &str) -> LockError {
        let current: Option<i64> = match self
            .db
            .query_row("SELECT fence FROM accounts WHERE id = ?1", params![id], |row| row.get(0))
            .optional()
        {
            Ok(current) => current,
            Err(err) => return sql(err),
        };
        match current.and_then(|c| u64::try_from(c).ok()) {
            Some(current) => LockError::StaleFence { presented: fence.get(), current },
            None => LockError::invalid(format!("no account {id:?}")),
        }
    }
}
