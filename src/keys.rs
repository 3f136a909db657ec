//! `heddle keys`: create, list and revoke the API keys of a store. A key is shown once, when it
//! is created; afterwards it is named by its id ([`heddle_store::key_id`]), which is not secret.

use clap::Subcommand;
use heddle_api::auth::{KEY_CACHE_TTL, generate_key, hash_key};
use heddle_proto::time::Micros;
use heddle_store::{KeyInfo, key_id};

use super::{StoreArgs, open_store};

#[derive(Subcommand)]
pub enum KeysCommand {
    /// Create a key that may only use projects `<ENTITY>/<project>`; prints the key, and its id
    /// on stderr.
    Create {
        #[arg(long)]
        entity: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// List every key: its id, entity (`admin` for admin keys), when it was created and revoked.
    /// Never shows a key or its hash.
    List {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Revoke the key with this id (from `keys list`). Running servers refuse it within seconds,
    /// without a restart. Revoking a revoked key changes nothing. The `--api-key` admin key is not
    /// stored, so it cannot be revoked: stop passing it instead.
    Revoke {
        /// The key's id, as `keys list` shows it.
        id: String,
        #[command(flatten)]
        store: StoreArgs,
    },
}

pub async fn run(command: KeysCommand) -> anyhow::Result<()> {
    match command {
        KeysCommand::Create { entity, store } => {
            if entity.is_empty() || entity.contains('/') {
                anyhow::bail!("--entity must be a non-empty name without '/'");
            }
            let store = open_store(&store).await?;
            let key = generate_key();
            let hash = hash_key(&key);
            store.create_key(&hash, Some(&entity)).await?;
            eprintln!(
                "API key {} for entity {entity:?} (shown once, store it safely):",
                key_id(&hash)
            );
            println!("{key}");
        }
        KeysCommand::List { store } => {
            let keys = open_store(&store).await?.list_keys().await?;
            print!("{}", table(&keys));
        }
        KeysCommand::Revoke { id, store } => {
            let store = open_store(&store).await?;
            let started = Micros::now();
            let key = store.revoke_key(&id).await?;
            // The store stamps a revocation with its caller's clock: an earlier time is older.
            let was_revoked = key.revoked_at.is_some_and(|at| at < started);
            let at = key.revoked_at.map(|t| t.to_rfc3339()).unwrap_or_default();
            if was_revoked {
                eprintln!("API key {} ({}) was already revoked at {at}", key.id, owner(&key));
            } else {
                eprintln!(
                    "revoked API key {} ({}) at {at}; running servers refuse it within {} s",
                    key.id,
                    owner(&key),
                    KEY_CACHE_TTL.as_secs()
                );
            }
            if key.entity.is_none() && !store.has_admin_key().await? {
                eprintln!(
                    "no admin key is left in the store: the next `heddle serve` started without \
                     --api-key generates a new one"
                );
            }
        }
    }
    Ok(())
}

/// `admin`, or the entity quoted (an entity may be named "admin", or hold spaces).
fn owner(key: &KeyInfo) -> String {
    match &key.entity {
        None => "admin".to_owned(),
        Some(entity) => format!("{entity:?}"),
    }
}

/// The keys as aligned columns under a header line.
fn table(keys: &[KeyInfo]) -> String {
    let rows: Vec<[String; 4]> = keys
        .iter()
        .map(|k| {
            let revoked = k.revoked_at.map_or_else(|| "-".to_owned(), |t| t.to_rfc3339());
            [k.id.clone(), owner(k), k.created_at.to_rfc3339(), revoked]
        })
        .collect();
    let header = ["ID", "ENTITY", "CREATED", "REVOKED"].map(str::to_owned);
    let mut widths = [0; 4];
    for row in std::iter::once(&header).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> =
            row.iter().zip(widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_keys_as_columns() {
        let keys = [
            KeyInfo {
                id: "0123456789ab".into(),
                entity: None,
                created_at: Micros(0),
                revoked_at: None,
            },
            KeyInfo {
                id: "ba9876543210".into(),
                entity: Some("admin".into()),
                created_at: Micros(1_000_000),
                revoked_at: Some(Micros(2_000_000)),
            },
        ];
        assert_eq!(
            table(&keys),
            "ID            ENTITY   CREATED                      REVOKED\n\
             0123456789ab  admin    1970-01-01T00:00:00.000000Z  -\n\
             ba9876543210  \"admin\"  1970-01-01T00:00:01.000000Z  1970-01-01T00:00:02.000000Z\n"
        );
    }
}
