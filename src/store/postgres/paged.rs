//! Records read a page at a time, and the JSON every record is kept as.

use sqlx::AssertSqlSafe;
use uuid::Uuid;

use super::error::{codec, from_sqlx};
use super::Postgres;
use crate::domain::Tenant;
use crate::store::contract::{Page, PageSize};
use crate::store::error::StoreError;

/// `record` as the JSON its table keeps.
pub(super) fn encode<T: serde::Serialize>(
    table: &'static str,
    record: &T,
) -> Result<String, StoreError> {
    serde_json::to_string(record).map_err(|err| codec(table, err))
}

/// A record of `table` read back from its JSON.
pub(super) fn decode<T: serde::de::DeserializeOwned>(
    table: &'static str,
    text: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|err| codec(table, err))
}

/// How many of the records, sized in bytes, a page takes: at most `size.limit`, and none
/// past the one that goes over `size.max_bytes`; and whether more follow.
pub(super) fn fit(sizes: &[i64], size: PageSize) -> (usize, bool) {
    let mut bytes = 0usize;
    for (taken, record) in sizes.iter().enumerate() {
        if taken >= size.limit || (taken > 0 && bytes > size.max_bytes) {
            return (taken, true);
        }
        bytes += usize::try_from(*record).unwrap_or(0);
    }
    (sizes.len(), false)
}

/// A family of records that is read a page at a time, in order within its owner.
pub(super) struct Paged {
    /// The table the records are in.
    pub table: &'static str,
    /// The column naming their owner: a conversation, a message.
    pub owner: &'static str,
    /// The column that orders them within it.
    pub order: &'static str,
}

impl Postgres {
    /// The records of `owner` after `after`, in order, as many as `size` allows, and
    /// whether more follow. Their sizes are read first, so a page never reads (or holds)
    /// records past its byte limit.
    pub(super) async fn read_page<T: serde::de::DeserializeOwned>(
        &self,
        paged: &Paged,
        tenant: &Tenant,
        owner: Uuid,
        after: i64,
        size: PageSize,
    ) -> Result<Page<T>, StoreError> {
        let Paged {
            table,
            owner: owner_column,
            order,
        } = *paged;
        let limit = i64::try_from(size.limit.saturating_add(1)).unwrap_or(i64::MAX);
        let sizes: Vec<(i64, i32)> = sqlx::query_as(AssertSqlSafe(format!(
            "SELECT {order}::bigint, octet_length(record) FROM {table} \
             WHERE tenant = $1 AND {owner_column} = $2 AND {order} > $3 ORDER BY {order} LIMIT $4"
        )))
        .bind(tenant.as_str())
        .bind(owner)
        .bind(after)
        .bind(limit)
        .fetch_all(&mut *self.connection().await?)
        .await
        .map_err(from_sqlx)?;
        let lengths: Vec<i64> = sizes.iter().map(|(_, len)| i64::from(*len)).collect();
        let (taken, more) = fit(&lengths, size);
        let Some(&(last, _)) = sizes.get(taken.saturating_sub(1)).filter(|_| taken > 0) else {
            return Ok(Page {
                items: Vec::new(),
                more,
            });
        };
        let rows: Vec<(String,)> = sqlx::query_as(AssertSqlSafe(format!(
            "SELECT record FROM {table} \
             WHERE tenant = $1 AND {owner_column} = $2 AND {order} > $3 AND {order} <= $4 \
             ORDER BY {order}"
        )))
        .bind(tenant.as_str())
        .bind(owner)
        .bind(after)
        .bind(last)
        .fetch_all(&mut *self.connection().await?)
        .await
        .map_err(from_sqlx)?;
        let items = rows
            .iter()
            .map(|(text,)| decode(table, text))
            .collect::<Result<_, _>>()?;
        Ok(Page { items, more })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_fits_its_limit_and_bytes() {
        let size = PageSize {
            limit: 3,
            max_bytes: 100,
        };
        assert_eq!(fit(&[10, 10], size), (2, false));
        assert_eq!(fit(&[10, 10, 10, 10], size), (3, true));
        assert_eq!(
            fit(&[60, 60, 10], size),
            (2, true),
            "stops once past the bytes"
        );
        assert_eq!(
            fit(&[500, 10], size),
            (1, true),
            "a large first record alone"
        );
    }
}
