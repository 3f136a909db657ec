//! `heddle keys list` and `heddle keys revoke` against the store of a running server: a revoked
//! key stops working within seconds, without a restart, while other keys keep working.

mod common;

use std::time::{Duration, Instant};

use common::{Server, complete, uid};
use heddle_api::auth::{KEY_CACHE_TTL, hash_key};
use heddle_store::key_id;
use serde_json::json;

/// How long the test waits for a revocation to reach the server before it fails: the cache's
/// TTL, plus a wide margin for a loaded machine.
const REVOCATION_DEADLINE: Duration = Duration::from_secs(KEY_CACHE_TTL.as_secs() * 4);

fn stdout(out: &std::process::Output) -> String {
    assert!(out.status.success(), "heddle keys failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).expect("utf-8")
}

/// The listing's line for key `id`, split into columns.
fn listed(listing: &str, id: &str) -> Vec<String> {
    let line = listing.lines().find(|l| l.starts_with(id)).unwrap_or_else(|| {
        panic!("key {id} is not listed:\n{listing}");
    });
    line.split_whitespace().map(str::to_owned).collect()
}

#[tokio::test]
async fn revoked_keys_stop_working_on_a_running_server() {
    let server = Server::start();
    let (alice_key, bob_key) = (server.create_entity_key("alice"), server.create_entity_key("bob"));
    let (alice, bob, admin) =
        (server.client(Some(&alice_key)), server.client(Some(&bob_key)), server.admin());
    let (alice_project, bob_project) = (format!("alice/{}", uid()), format!("bob/{}", uid()));
    let call = |project: &str, id: &str| complete(project, id, json!({}));

    // The key works (and the server now has it cached).
    alice.complete_calls(&alice_project, vec![call(&alice_project, "a1")]).await;
    assert_eq!(alice.read_call(&alice_project, "a1").await["id"], "a1");

    // The listing names it by id, with its entity, unrevoked; never the key or its hash.
    let alice_hash = hash_key(&alice_key);
    let id = key_id(&alice_hash).to_owned();
    let listing = stdout(&server.keys(&["list"]));
    assert_eq!(listed(&listing, &id)[1..2], ["\"alice\"".to_owned()], "{listing}");
    assert_eq!(listed(&listing, &id).last().unwrap(), "-", "not revoked: {listing}");
    listed(&listing, key_id(&hash_key(&bob_key)));
    for secret in [&alice_key, &bob_key, &alice_hash, &hash_key(&bob_key)] {
        assert!(!listing.contains(secret.as_str()), "the listing shows a secret:\n{listing}");
    }
    assert!(listing.starts_with("ID "), "{listing}");

    let revoked = server.keys(&["revoke", &id]);
    stdout(&revoked);
    let revoked_at = Instant::now();

    // Within the cache's TTL the running server refuses the key: every request with it is
    // 401 from then on, while the other keys keep working.
    let refused = loop {
        let r = alice.post("/calls/query_stats", &json!({"project_id": alice_project})).await;
        match r.status {
            401 => break revoked_at.elapsed(),
            200 => {}
            other => panic!("unexpected {other}: {}", r.text()),
        }
        assert!(revoked_at.elapsed() < REVOCATION_DEADLINE, "the revoked key still works");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!("revoked key refused {} ms after the revocation", refused.as_millis());
    let body = json!({"batch": [call(&alice_project, "a2")]});
    alice.post(&format!("/v2/{alice_project}/calls/complete"), &body).await.err(401);
    alice.post("/calls/stream_query", &json!({"project_id": alice_project})).await.err(401);
    let bearer = server.client_with_auth(&format!("Bearer {alice_key}"));
    bearer.get("/version").await.err(401);
    assert_eq!(admin.count(&json!({"project_id": alice_project})).await, 1, "a2 was not stored");

    bob.complete_calls(&bob_project, vec![call(&bob_project, "b1")]).await;
    assert_eq!(bob.read_call(&bob_project, "b1").await["id"], "b1");
    assert_eq!(admin.read_call(&alice_project, "a1").await["id"], "a1");

    // The listing shows the revocation; revoking again changes nothing and succeeds.
    let listing = stdout(&server.keys(&["list"]));
    let when = listed(&listing, &id).last().unwrap().clone();
    assert!(when.ends_with('Z') && when.len() > 20, "a revocation time: {listing}");
    stdout(&server.keys(&["revoke", &id.to_uppercase()]));
    let again = stdout(&server.keys(&["list"]));
    assert_eq!(listed(&again, &id).last().unwrap(), &when, "the first revocation time stays");
    assert_eq!(listed(&again, key_id(&hash_key(&bob_key))).last().unwrap(), "-");
}

#[tokio::test]
async fn revoking_an_unknown_id_fails_clearly() {
    let server = Server::start();
    server.create_entity_key("alice");
    for (id, reason) in
        [("000000000000", "no API key with id 000000000000"), ("not-an-id", "is not an API key id")]
    {
        let out = server.keys(&["revoke", id]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "revoking {id} succeeded");
        assert!(stderr.contains(reason), "{id}: {stderr}");
    }
    // Nothing was revoked.
    let listing = stdout(&server.keys(&["list"]));
    assert_eq!(listing.lines().count(), 2, "{listing}");
    assert!(listing.lines().nth(1).unwrap().ends_with(" -"), "{listing}");
}
