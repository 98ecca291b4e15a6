//! PostgreSQL's failures filed under the store's categories.

use crate::store::error::{Category, StoreError};

/// An unavailable-store error saying `why`.
pub fn unavailable(why: &str) -> StoreError {
    StoreError::Backend {
        category: Category::Unavailable,
        message: why.to_owned(),
    }
}

/// What a failure says, without anything of the URL it connected with (sqlx's texts hold
/// none; configuration errors, which could, are not shown).
pub fn text(err: &sqlx::Error) -> String {
    if matches!(err, sqlx::Error::Configuration(_)) {
        return "the database URL is not valid".to_owned();
    }
    err.to_string()
}

/// The category of a failure: unavailable when waiting may help (the connection, a
/// timeout, a full disk, a server shutting down), conflict for a lost race.
pub fn category(err: &sqlx::Error) -> Category {
    use sqlx::Error;
    if let Error::Database(db) = err {
        return database_category(db.code().as_deref());
    }
    if matches!(
        err,
        Error::Io(_)
            | Error::Tls(_)
            | Error::Protocol(_)
            | Error::PoolTimedOut
            | Error::PoolClosed
            | Error::WorkerCrashed
            | Error::BeginFailed
    ) {
        Category::Unavailable
    } else if matches!(err, Error::RowNotFound) {
        Category::NotFound
    } else if matches!(err, Error::ColumnDecode { .. } | Error::Decode(_)) {
        Category::Corrupt
    } else {
        Category::Internal
    }
}

/// The category of an error the server reported, by its SQLSTATE.
fn database_category(code: Option<&str>) -> Category {
    match code {
        // Serialization failure, deadlock, unique violation: another writer won.
        Some("40001" | "40P01" | "23505") => Category::Conflict,
        // Connection exceptions, resources (a full disk), operator intervention (a
        // shutdown, a statement's timeout).
        Some(code)
            if code.starts_with("08") || code.starts_with("53") || code.starts_with("57") =>
        {
            Category::Unavailable
        }
        Some(_) | None => Category::Internal,
    }
}

/// Whether `err` says the connection itself is gone (closed, or ended by the server:
/// `08…`, `57P01`–`57P03`), so a new connection may succeed where it failed.
pub fn is_connection_lost(err: &sqlx::Error) -> bool {
    use sqlx::Error;
    if let Error::Database(db) = err {
        return db
            .code()
            .is_some_and(|code| code.starts_with("08") || code.starts_with("57P"));
    }
    matches!(err, Error::Io(_) | Error::Tls(_) | Error::Protocol(_))
}

/// Whether `err` says the database is slow rather than gone: a wait for a connection, or a
/// statement cancelled by its timeout (`57014`).
pub fn is_overload(err: &sqlx::Error) -> bool {
    if let sqlx::Error::Database(db) = err {
        return db.code().as_deref() == Some("57014");
    }
    matches!(err, sqlx::Error::PoolTimedOut)
}

/// The store error for a failure.
pub fn from_sqlx(err: sqlx::Error) -> StoreError {
    let category = category(&err);
    let message = match category {
        // Said in the words a client of a run reads when its stream ends for it.
        Category::Unavailable => format!("the database cannot be reached: {}", text(&err)),
        Category::Conflict | Category::NotFound | Category::Corrupt | Category::Internal => {
            text(&err)
        }
    };
    StoreError::Backend { category, message }
}

/// A record that cannot be encoded or decoded.
pub fn codec(table: &'static str, source: serde_json::Error) -> StoreError {
    StoreError::Codec {
        record: table,
        source,
    }
}
