//! Static checks of the distributed deployment: `docker-compose.yml`, the `Dockerfile`, the
//! router's nginx config and the ClickHouse config override in `deploy/`. No Docker engine is
//! needed: the files are parsed and checked against the built `heddle` binary (every role and
//! every `HEDDLE_*` variable a service sets must be one the role accepts, read from
//! `heddle <role> --help`) and against the routes the ingest and query crates declare. When the
//! `docker compose` plugin is installed, `docker compose config -q` validates the file as well.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use regex::Regex;
use yaml_rust2::{Yaml, YamlLoader};

/// The host port of the one entry URL.
const ENTRY_PORT: u16 = 6345;
const ROLES: &[&str] = &["serve", "ingest", "consume", "query", "migrate"];
/// Services the deployment must have.
const SERVICES: &[&str] = &[
    "clickhouse",
    "kafka",
    "heddle-migrate",
    "heddle-ingest",
    "heddle-consume",
    "heddle-query",
    "router",
];
/// The ingest role's paths, including the OTLP ones (also read from `ingest/src`, see
/// `declared_routes`): the router must send each to heddle-ingest.
const INGEST_PATHS: &[&str] = &[
    "/call/start",
    "/call/end",
    "/call/upsert_batch",
    "/v2/{entity}/{project}/calls/complete",
    "/v2/{entity}/{project}/call/start",
    "/v2/{entity}/{project}/call/end",
    "/otel/v1/traces",
    "/agents/otel/v1/traces",
    "/otel/v1/logs",
];
/// Paths that must reach heddle-query: service endpoints and near misses of the ingest paths
/// (routes declared in `query/src` are added to these).
const QUERY_PATHS: &[&str] = &[
    "/",
    "/health",
    "/server_info",
    "/graphql",
    "/call/read",
    "/call/starts",
    "/call/start/x",
    "/calls/complete",
    "/v2/acme/proj/calls/complete/x",
    "/v2/acme/proj/x/call/start",
    "/v2/acme/calls/complete",
    "/otel/v1/metrics",
    // The agents API's reads (docs/api/agents.md) share the OTLP alias's prefix.
    "/agents/otel/v1/metrics",
    "/agents/otel/v1/traces/x",
    // The model-provider routes answer 501 from the query role (declared from a list in
    // query/src/unsupported.rs, which the route scan does not read).
    "/completions/create",
    "/completions/create_stream",
    "/image/create",
    "/evaluations/evaluate_model",
    "/evaluations/rescore",
    "/evaluations/status",
    "/calls/score",
    // Project settings: written by the query role, read by ingest from the store.
    "/project/ttl_settings/update",
    "/project/sensitive_data_settings",
    "/project/sensitive_data_settings/update",
    "/project/ingest_sampling_settings/read",
    "/otel/v1/logs/x",
    "/agents/otel/v1/logs",
    // The web UI (routes declared in `ui/src` are added too): the links the SDK prints, also
    // for an entity named like an API prefix.
    "/acme/demo/weave",
    "/acme/demo/r/call/019a-call",
    "/v2/demo/r/call/019a-call",
    "/otel/demo/weave/calls",
    "/signin",
    "/static/heddle.css",
];
/// System log tables that must have a TTL (the default config enables them all).
const LOG_TABLES: &[&str] = &[
    "query_log",
    "query_thread_log",
    "query_views_log",
    "part_log",
    "trace_log",
    "text_log",
    "metric_log",
    "asynchronous_metric_log",
    "processors_profile_log",
    "asynchronous_insert_log",
    "error_log",
];
const MIB: u64 = 1024 * 1024;

// ---- files -------------------------------------------------------------------------------------

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: impl AsRef<Path>) -> String {
    let path = root().join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

// ---- docker-compose.yml ------------------------------------------------------------------------

struct Compose {
    doc: Yaml,
}

struct Service<'a> {
    name: String,
    def: &'a Yaml,
}

impl Compose {
    fn load() -> Compose {
        let text = read("docker-compose.yml");
        let mut docs = YamlLoader::load_from_str(&text).expect("docker-compose.yml is valid YAML");
        assert_eq!(docs.len(), 1, "docker-compose.yml holds one document");
        let mut doc = docs.remove(0);
        apply_merge_keys(&mut doc);
        Compose { doc }
    }

    fn services(&self) -> Vec<Service<'_>> {
        let services = self.doc["services"].as_hash().expect("a `services` mapping");
        services
            .iter()
            .map(|(k, v)| Service {
                name: k.as_str().expect("service names are strings").into(),
                def: v,
            })
            .collect()
    }

    fn service(&self, name: &str) -> Service<'_> {
        self.services()
            .into_iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("docker-compose.yml has no service {name:?}"))
    }

    /// The services built from this repository's Dockerfile: the heddle roles.
    fn heddle_services(&self) -> Vec<Service<'_>> {
        self.services().into_iter().filter(|s| !s.def["build"].is_badvalue()).collect()
    }

    /// Services others wait for with `service_completed_successfully`: one-shot jobs.
    fn one_shot(&self) -> BTreeSet<String> {
        self.services()
            .iter()
            .flat_map(|s| s.depends_on())
            .filter(|(_, condition)| condition == "service_completed_successfully")
            .map(|(target, _)| target)
            .collect()
    }
}

impl Service<'_> {
    fn env(&self) -> BTreeMap<String, String> {
        match &self.def["environment"] {
            Yaml::Hash(h) => h
                .iter()
                .map(|(k, v)| {
                    (scalar(k).expect("env names are scalars"), scalar(v).unwrap_or_default())
                })
                .collect(),
            Yaml::Array(a) => a
                .iter()
                .map(|item| {
                    let item = scalar(item).expect("env entries are strings");
                    match item.split_once('=') {
                        Some((k, v)) => (k.to_string(), v.to_string()),
                        None => (item, String::new()),
                    }
                })
                .collect(),
            Yaml::BadValue | Yaml::Null => BTreeMap::new(),
            other => panic!("{}: unexpected environment {other:?}", self.name),
        }
    }

    fn command(&self) -> Vec<String> {
        words(&self.def["command"])
    }

    /// `(target, condition)` pairs.
    fn depends_on(&self) -> Vec<(String, String)> {
        match &self.def["depends_on"] {
            Yaml::Array(a) => {
                a.iter().map(|t| (scalar(t).unwrap(), "service_started".to_string())).collect()
            }
            Yaml::Hash(h) => h
                .iter()
                .map(|(k, v)| {
                    let condition =
                        v["condition"].as_str().unwrap_or("service_started").to_string();
                    (scalar(k).unwrap(), condition)
                })
                .collect(),
            Yaml::BadValue | Yaml::Null => Vec::new(),
            other => panic!("{}: unexpected depends_on {other:?}", self.name),
        }
    }

    fn condition_on(&self, target: &str) -> Option<String> {
        self.depends_on().into_iter().find(|(t, _)| t == target).map(|(_, c)| c)
    }

    /// The health check's command as text, or None when there is none or it is disabled.
    fn healthcheck(&self) -> Option<String> {
        let hc = &self.def["healthcheck"];
        if hc.is_badvalue() || hc["disable"].as_bool() == Some(true) {
            return None;
        }
        let test = words(&hc["test"]);
        if test.is_empty() || test[0] == "NONE" {
            return None;
        }
        Some(test.join(" "))
    }

    fn image(&self) -> String {
        self.def["image"].as_str().unwrap_or_default().to_string()
    }

    /// `(source, target)` of each volume.
    fn volumes(&self) -> Vec<(String, String)> {
        let Some(volumes) = self.def["volumes"].as_vec() else { return Vec::new() };
        volumes
            .iter()
            .map(|v| match v {
                Yaml::String(s) => {
                    let parts: Vec<&str> = s.split(':').collect();
                    assert!(parts.len() >= 2, "{}: volume {s:?} has no target", self.name);
                    (parts[0].to_string(), parts[1].to_string())
                }
                Yaml::Hash(_) => (
                    scalar(&v["source"]).unwrap_or_default(),
                    scalar(&v["target"]).expect("a volume target"),
                ),
                other => panic!("{}: unexpected volume {other:?}", self.name),
            })
            .collect()
    }

    /// `(published, target)` host ports.
    fn ports(&self) -> Vec<(u16, u16)> {
        let Some(ports) = self.def["ports"].as_vec() else { return Vec::new() };
        ports
            .iter()
            .map(|p| match p {
                Yaml::Hash(_) => (
                    scalar(&p["published"]).and_then(|s| s.parse().ok()).expect("published port"),
                    scalar(&p["target"]).and_then(|s| s.parse().ok()).expect("target port"),
                ),
                _ => {
                    let s = scalar(p).expect("a port mapping");
                    let s = s.split('/').next().unwrap();
                    let parts: Vec<&str> = s.rsplitn(3, ':').collect();
                    assert!(parts.len() >= 2, "{}: port {s:?} publishes nothing", self.name);
                    (parts[1].parse().expect("published port"), parts[0].parse().expect("port"))
                }
            })
            .collect()
    }
}

/// Applies YAML merge keys (`<<: *anchor`, `<<: [*a, *b]`), which Compose supports: keys
/// already present win, then earlier sources over later ones.
fn apply_merge_keys(node: &mut Yaml) {
    match node {
        Yaml::Hash(h) => {
            let merge_key = Yaml::String("<<".into());
            if let Some(sources) = h.remove(&merge_key) {
                let sources = match sources {
                    Yaml::Array(a) => a,
                    other => vec![other],
                };
                for source in sources {
                    let Yaml::Hash(source) = source else { panic!("`<<` merges a mapping") };
                    for (k, v) in source {
                        h.entry(k).or_insert(v);
                    }
                }
            }
            for (_, v) in h.iter_mut() {
                apply_merge_keys(v);
            }
        }
        Yaml::Array(a) => a.iter_mut().for_each(apply_merge_keys),
        _ => {}
    }
}

fn scalar(y: &Yaml) -> Option<String> {
    match y {
        Yaml::String(s) | Yaml::Real(s) => Some(s.clone()),
        Yaml::Integer(i) => Some(i.to_string()),
        Yaml::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A command-like value: a list of words, or a string split on whitespace.
fn words(y: &Yaml) -> Vec<String> {
    match y {
        Yaml::Array(a) => a.iter().map(|w| scalar(w).expect("command words are scalars")).collect(),
        Yaml::BadValue | Yaml::Null => Vec::new(),
        other => scalar(other).unwrap().split_whitespace().map(String::from).collect(),
    }
}

/// `host:port` → port.
fn port_of(addr: &str) -> u16 {
    addr.rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {addr:?}"))
}

// ---- the binary's roles ------------------------------------------------------------------------

/// What `heddle <role> --help` says: each accepted environment variable and its default.
struct RoleHelp {
    env: BTreeMap<String, Option<String>>,
}

fn role_help(role: &str) -> RoleHelp {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_heddle"));
    cmd.args([role, "--help"]);
    // Set variables would show up as values in the help; keep it the built-in text.
    for (name, _) in std::env::vars() {
        if name.starts_with("HEDDLE_") {
            cmd.env_remove(name);
        }
    }
    let out = cmd.output().expect("running heddle --help");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "`heddle {role} --help` failed: {out:?}");
    let re =
        Regex::new(r"\[env:\s+([A-Z0-9_]+)(?:=[^\]]*)?\](?:\s*\[default:\s+([^\]]*)\])?").unwrap();
    let env: BTreeMap<_, _> = re
        .captures_iter(&text)
        .map(|c| (c[1].to_string(), c.get(2).map(|d| d.as_str().to_string())))
        .collect();
    assert!(!env.is_empty(), "`heddle {role} --help` lists no environment variables:\n{text}");
    RoleHelp { env }
}

impl RoleHelp {
    /// The value a service gives `name`, else the role's default.
    fn value(&self, env: &BTreeMap<String, String>, name: &str) -> Option<String> {
        env.get(name).cloned().or_else(|| self.env.get(name).cloned().flatten())
    }
}

fn role_of(service: &Service) -> String {
    let command = service.command();
    assert!(
        !command.is_empty(),
        "{}: a heddle service names its role as its command",
        service.name
    );
    command[0].clone()
}

// ---- nginx -------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Directive {
    name: String,
    args: Vec<String>,
    block: Option<Vec<Directive>>,
}

/// Parses nginx's config syntax: `name args... ;` and `name args... { ... }`, `#` comments,
/// quoted strings.
fn parse_nginx(text: &str) -> Vec<Directive> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    let mut word = String::new();
    let flush = |word: &mut String, tokens: &mut Vec<String>| {
        if !word.is_empty() {
            tokens.push(std::mem::take(word));
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '#' => {
                flush(&mut word, &mut tokens);
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '"' | '\'' => {
                for q in chars.by_ref() {
                    if q == c {
                        break;
                    }
                    word.push(q);
                }
            }
            '{' | '}' | ';' => {
                flush(&mut word, &mut tokens);
                tokens.push(c.to_string());
            }
            c if c.is_whitespace() => flush(&mut word, &mut tokens),
            c => word.push(c),
        }
    }
    flush(&mut word, &mut tokens);
    let mut pos = 0;
    let directives = parse_block(&tokens, &mut pos);
    assert_eq!(pos, tokens.len(), "unbalanced braces in the nginx config");
    directives
}

fn parse_block(tokens: &[String], pos: &mut usize) -> Vec<Directive> {
    let mut out = Vec::new();
    let mut current: Vec<String> = Vec::new();
    while *pos < tokens.len() {
        let t = &tokens[*pos];
        *pos += 1;
        match t.as_str() {
            ";" => {
                let mut words = std::mem::take(&mut current).into_iter();
                let name = words.next().expect("a directive name before ';'");
                out.push(Directive { name, args: words.collect(), block: None });
            }
            "{" => {
                let mut words = std::mem::take(&mut current).into_iter();
                let name = words.next().expect("a directive name before '{'");
                let block = parse_block(tokens, pos);
                out.push(Directive { name, args: words.collect(), block: Some(block) });
            }
            "}" => {
                assert!(current.is_empty(), "a directive without ';' before '}}': {current:?}");
                return out;
            }
            _ => current.push(t.clone()),
        }
    }
    assert!(current.is_empty(), "a directive without ';' at the end: {current:?}");
    out
}

fn find<'a>(block: &'a [Directive], name: &str) -> Vec<&'a Directive> {
    block.iter().filter(|d| d.name == name).collect()
}

fn single_arg(block: &[Directive], name: &str) -> Option<String> {
    find(block, name).last().map(|d| d.args.join(" "))
}

/// nginx sizes: `64m`, `1024k`, `1g`, bytes.
fn nginx_size(s: &str) -> u64 {
    let s = s.to_ascii_lowercase();
    let (num, mult) = match s.chars().last() {
        Some('k') => (&s[..s.len() - 1], 1024),
        Some('m') => (&s[..s.len() - 1], MIB),
        Some('g') => (&s[..s.len() - 1], 1024 * MIB),
        _ => (&s[..], 1),
    };
    num.parse::<u64>().unwrap_or_else(|_| panic!("bad nginx size {s:?}")) * mult
}

struct Location {
    modifier: String,
    pattern: String,
    body: Vec<Directive>,
}

/// Picks the location nginx uses for `path`: an exact match; else the longest prefix if it is
/// `^~`; else the first matching regex in file order; else the longest prefix.
fn choose_location<'a>(locations: &'a [Location], path: &str) -> Option<&'a Location> {
    if let Some(exact) = locations.iter().find(|l| l.modifier == "=" && l.pattern == path) {
        return Some(exact);
    }
    let prefix = locations
        .iter()
        .filter(|l| (l.modifier.is_empty() || l.modifier == "^~") && path.starts_with(&l.pattern))
        .max_by_key(|l| l.pattern.len());
    if let Some(p) = prefix.filter(|p| p.modifier == "^~") {
        return Some(p);
    }
    let regex = locations.iter().find(|l| {
        let re = match l.modifier.as_str() {
            "~" => Regex::new(&l.pattern),
            "~*" => Regex::new(&format!("(?i){}", l.pattern)),
            _ => return false,
        };
        re.unwrap_or_else(|e| panic!("location regex {:?}: {e}", l.pattern)).is_match(path)
    });
    regex.or(prefix)
}

fn locations(server: &[Directive]) -> Vec<Location> {
    find(server, "location")
        .into_iter()
        .map(|d| {
            let (modifier, pattern) = match d.args.as_slice() {
                [pattern] => (String::new(), pattern.clone()),
                [modifier, pattern] => (modifier.clone(), pattern.clone()),
                other => panic!("unexpected location arguments {other:?}"),
            };
            let body = d.block.clone().expect("a location block");
            assert!(find(&body, "location").is_empty(), "nested locations are not checked");
            Location { modifier, pattern, body }
        })
        .collect()
}

/// The router's config, and where each path ends up.
struct Router {
    http: Vec<Directive>,
    server: Vec<Directive>,
    locations: Vec<Location>,
}

impl Router {
    fn load(compose: &Compose) -> Router {
        let router = compose.service("router");
        let (source, _) = router
            .volumes()
            .into_iter()
            .find(|(_, target)| target == "/etc/nginx/nginx.conf")
            .expect("the router mounts its config at /etc/nginx/nginx.conf");
        let source = source.trim_start_matches("./");
        assert!(source.starts_with("deploy/"), "the router's config lives in deploy/: {source}");
        let top = parse_nginx(&read(source));
        let http = find(&top, "http");
        assert_eq!(http.len(), 1, "one http block");
        let http = http[0].block.clone().unwrap();
        let ports: Vec<u16> = router.ports().iter().map(|&(_, target)| target).collect();
        let server = find(&http, "server")
            .into_iter()
            .map(|s| s.block.clone().unwrap())
            .find(|s| {
                find(s, "listen")
                    .iter()
                    .any(|l| ports.contains(&port_of(&format!(":{}", l.args[0]))))
            })
            .expect("a server block listening on the router's published port");
        let locations = locations(&server);
        Router { http, server, locations }
    }

    fn location(&self, path: &str) -> &Location {
        choose_location(&self.locations, path)
            .unwrap_or_else(|| panic!("no router location matches {path}"))
    }

    /// The `host:port`s the location proxies to, through an upstream block when it names one.
    fn backends(&self, path: &str) -> Vec<String> {
        let location = self.location(path);
        let pass = single_arg(&location.body, "proxy_pass")
            .unwrap_or_else(|| panic!("location {:?} has no proxy_pass", location.pattern));
        let target = pass.strip_prefix("http://").expect("proxy_pass http://...");
        let target = target.split('/').next().unwrap();
        let upstream = find(&self.http, "upstream").into_iter().find(|u| u.args == [target]);
        match upstream {
            Some(u) => find(u.block.as_ref().unwrap(), "server")
                .iter()
                .map(|s| s.args[0].clone())
                .collect(),
            None => vec![target.to_string()],
        }
    }

    /// A directive's value as nginx applies it in `location`: location, server, then http.
    fn effective(&self, location: &Location, name: &str) -> Option<String> {
        single_arg(&location.body, name)
            .or_else(|| single_arg(&self.server, name))
            .or_else(|| single_arg(&self.http, name))
    }
}

/// Concrete request paths for route templates: `{entity}` → a sample segment.
fn concrete(template: &str) -> String {
    Regex::new(r"\{[^}/]+\}").unwrap().replace_all(template, "seg-1").into_owned()
}

/// The routes a crate declares with `.route("...")` in its sources.
fn declared_routes(dir: &str) -> BTreeSet<String> {
    let re = Regex::new(r#"\.route\(\s*"([^"]+)""#).unwrap();
    let mut routes = BTreeSet::new();
    let mut stack = vec![root().join(dir)];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                routes.extend(re.captures_iter(&text).map(|c| c[1].to_string()));
            }
        }
    }
    routes
}

// ---- tests -------------------------------------------------------------------------------------

#[test]
fn services_run_real_roles_with_accepted_settings() {
    let compose = Compose::load();
    for name in SERVICES {
        compose.service(name);
    }
    let heddle = compose.heddle_services();
    let names: BTreeSet<_> = heddle.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        BTreeSet::from(["heddle-migrate", "heddle-ingest", "heddle-consume", "heddle-query"]),
        "the services built from the Dockerfile"
    );
    for service in &heddle {
        let build = &service.def["build"];
        assert_eq!(
            scalar(&build["context"]).as_deref(),
            Some("."),
            "{}: build context",
            service.name
        );
        assert_eq!(scalar(&build["dockerfile"]).as_deref(), Some("Dockerfile"), "{}", service.name);
        assert!(
            service.def["entrypoint"].is_badvalue(),
            "{}: keeps the image's entrypoint",
            service.name
        );
        let role = role_of(service);
        assert!(ROLES.contains(&role.as_str()), "{}: {role:?} is not a heddle role", service.name);
        assert_eq!(service.name, format!("heddle-{role}"), "services are named after their role");
        let help = role_help(&role);
        let env = service.env();
        for name in env.keys().filter(|k| k.starts_with("HEDDLE_")) {
            assert!(
                help.env.contains_key(name),
                "{}: `heddle {role}` does not accept {name} (accepted: {:?})",
                service.name,
                help.env.keys().collect::<Vec<_>>()
            );
        }
        // Without these a role silently falls back to a per-container SQLite store.
        let url = env.get("HEDDLE_CLICKHOUSE_URL").unwrap_or_else(|| {
            panic!("{}: HEDDLE_CLICKHOUSE_URL must be set (else the store is SQLite)", service.name)
        });
        let host = url.trim_start_matches("http://").split([':', '/']).next().unwrap();
        compose.service(host);
        if role == "ingest" || role == "consume" {
            let brokers = env.get("HEDDLE_KAFKA_BROKERS").expect("HEDDLE_KAFKA_BROKERS");
            for broker in brokers.split(',') {
                let host = broker.split(':').next().unwrap();
                let kafka_env = compose.service(host).env();
                let advertised = kafka_env.get("KAFKA_ADVERTISED_LISTENERS").expect("listeners");
                assert!(advertised.contains(broker), "{broker} is not advertised: {advertised}");
            }
        }
        if role != "migrate" {
            assert!(env.contains_key("HEDDLE_API_KEY"), "{}: sets the admin key", service.name);
        }
        if role == "query" {
            // Replicas must accept each other's UI sessions (docs/ui.md, "Sessions").
            assert!(env.contains_key("HEDDLE_UI_SECRET"), "{}: shares a UI secret", service.name);
        }
    }

    // Every role shares one ClickHouse database and its credentials.
    let clickhouse = compose.service("clickhouse").env();
    for service in &heddle {
        let env = service.env();
        for (heddle_var, ch_var) in [
            ("HEDDLE_CLICKHOUSE_USER", "CLICKHOUSE_USER"),
            ("HEDDLE_CLICKHOUSE_PASSWORD", "CLICKHOUSE_PASSWORD"),
        ] {
            assert_eq!(
                env.get(heddle_var),
                clickhouse.get(ch_var),
                "{}: {heddle_var}",
                service.name
            );
        }
        assert_eq!(
            env.get("HEDDLE_CLICKHOUSE_DATABASE"),
            heddle[0].env().get("HEDDLE_CLICKHOUSE_DATABASE"),
            "{}: the same database",
            service.name
        );
    }
    let image = heddle[0].image();
    assert!(heddle.iter().all(|s| s.image() == image), "one heddle image for every role");
}

#[test]
fn secrets_come_from_the_environment() {
    let compose = Compose::load();
    let required = Regex::new(r"^\$\{([A-Z0-9_]+):\?[^}]+\}$").unwrap();
    for service in compose.services() {
        for (name, value) in service.env() {
            if ["PASSWORD", "API_KEY", "SECRET", "TOKEN"].iter().any(|s| name.contains(s)) {
                assert!(
                    required.is_match(&value),
                    "{}: {name} must come from the environment as ${{VAR:?message}}, not {value:?}",
                    service.name
                );
            }
            if name == "HEDDLE_API_KEY" {
                assert_eq!(&required.captures(&value).unwrap()[1], "HEDDLE_API_KEY");
            }
        }
    }
}

#[test]
fn healthchecks_and_start_order() {
    let compose = Compose::load();
    let services = compose.services();
    let names: BTreeSet<String> = services.iter().map(|s| s.name.clone()).collect();
    let one_shot = compose.one_shot();
    assert!(one_shot.contains("heddle-migrate"), "the roles wait for heddle-migrate to finish");

    for service in &services {
        let restart = scalar(&service.def["restart"]).unwrap_or_else(|| "no".into());
        if one_shot.contains(&service.name) {
            assert!(
                restart == "no" || restart.starts_with("on-failure"),
                "{}: a one-shot job must not restart {restart:?}",
                service.name
            );
        } else {
            assert!(service.healthcheck().is_some(), "{} has no health check", service.name);
        }
        for (target, condition) in service.depends_on() {
            assert!(names.contains(&target), "{} depends on unknown {target}", service.name);
            match condition.as_str() {
                "service_healthy" => assert!(
                    compose.service(&target).healthcheck().is_some(),
                    "{} waits for {target} to be healthy, which has no health check",
                    service.name
                ),
                "service_completed_successfully" | "service_started" => {}
                other => panic!("{}: unknown depends_on condition {other:?}", service.name),
            }
        }
    }

    // No dependency cycles: peel off services whose dependencies are all started.
    let mut left: BTreeMap<String, BTreeSet<String>> = services
        .iter()
        .map(|s| (s.name.clone(), s.depends_on().into_iter().map(|(t, _)| t).collect()))
        .collect();
    while !left.is_empty() {
        let ready: Vec<String> =
            left.iter().filter(|(_, deps)| deps.is_empty()).map(|(n, _)| n.clone()).collect();
        assert!(!ready.is_empty(), "a depends_on cycle among {:?}", left.keys());
        for name in ready {
            left.remove(&name);
            left.values_mut().for_each(|deps| {
                deps.remove(&name);
            });
        }
    }

    let wants = |service: &str, target: &str, condition: &str| {
        assert_eq!(
            compose.service(service).condition_on(target).as_deref(),
            Some(condition),
            "{service} must wait for {target} ({condition})"
        );
    };
    wants("heddle-migrate", "clickhouse", "service_healthy");
    for role in ["heddle-ingest", "heddle-consume", "heddle-query"] {
        wants(role, "heddle-migrate", "service_completed_successfully");
    }
    for role in ["heddle-ingest", "heddle-consume"] {
        wants(role, "kafka", "service_healthy");
    }

    // Each long-running role is checked on the /health of the address it listens on.
    for service in compose.heddle_services() {
        let role = role_of(&service);
        let listen_var = match role.as_str() {
            "migrate" => continue,
            "consume" => "HEDDLE_METRICS_LISTEN",
            _ => "HEDDLE_LISTEN",
        };
        let help = role_help(&role);
        let listen = help.value(&service.env(), listen_var).expect("a listen address");
        assert!(
            !listen.starts_with("127.") && !listen.starts_with("localhost"),
            "{}: {listen_var}={listen} is unreachable from other containers",
            service.name
        );
        let check = service.healthcheck().unwrap();
        assert!(
            check.contains(&format!(":{}/health", port_of(&listen))),
            "{}: health check {check:?} should hit /health on {listen}",
            service.name
        );
    }
}

#[test]
fn router_is_the_one_entry_url() {
    let compose = Compose::load();
    let router = compose.service("router");
    assert!(
        router.ports().iter().any(|&(published, _)| published == ENTRY_PORT),
        "the router publishes port {ENTRY_PORT}: {:?}",
        router.ports()
    );
    for service in compose.services().iter().filter(|s| s.name != "router") {
        assert!(
            service.ports().is_empty(),
            "{} should be reached through the router",
            service.name
        );
    }
    let nginx = Router::load(&compose);

    let backend_of = |service: &str| {
        let s = compose.service(service);
        let listen = role_help(&role_of(&s)).value(&s.env(), "HEDDLE_LISTEN").unwrap();
        format!("{service}:{}", port_of(&listen))
    };
    let (ingest, query) = (backend_of("heddle-ingest"), backend_of("heddle-query"));

    let mut ingest_paths: BTreeSet<String> = INGEST_PATHS.iter().map(|p| concrete(p)).collect();
    ingest_paths.extend(declared_routes("ingest/src").iter().map(|p| concrete(p)));
    let mut query_paths: BTreeSet<String> = QUERY_PATHS.iter().map(|p| p.to_string()).collect();
    query_paths.extend(declared_routes("query/src").iter().map(|p| concrete(p)));
    query_paths.extend(declared_routes("ui/src").iter().map(|p| concrete(p)));
    assert!(query_paths.contains("/obj/read"), "query routes were found in query/src");
    assert!(query_paths.contains("/seg-1/seg-1/r/call/seg-1"), "UI routes were found in ui/src");
    for path in &ingest_paths {
        let backends = nginx.backends(path);
        assert!(
            !backends.is_empty() && backends.iter().all(|b| b == &ingest),
            "{path} must go to {ingest}, goes to {backends:?}"
        );
    }
    for path in query_paths.difference(&ingest_paths) {
        let backends = nginx.backends(path);
        assert!(
            !backends.is_empty() && backends.iter().all(|b| b == &query),
            "{path} must go to {query}, goes to {backends:?}"
        );
    }

    // Bodies up to heddle's own limit pass the router, streamed.
    let max_body: u64 = ["heddle-ingest", "heddle-query"]
        .iter()
        .map(|name| {
            let s = compose.service(name);
            let help = role_help(&role_of(&s));
            help.value(&s.env(), "HEDDLE_MAX_BODY_BYTES").unwrap().parse::<u64>().unwrap()
        })
        .max()
        .unwrap();
    assert!(max_body >= 32 * MIB, "heddle accepts 32 MiB bodies");
    for location in &nginx.locations {
        let limit =
            nginx.effective(location, "client_max_body_size").unwrap_or_else(|| "1m".into());
        let limit = nginx_size(&limit);
        assert!(
            limit == 0 || limit >= max_body.max(32 * MIB),
            "location {:?}: client_max_body_size {limit} is below heddle's {max_body}",
            location.pattern
        );
        assert_eq!(
            nginx.effective(location, "proxy_request_buffering").as_deref(),
            Some("off"),
            "location {:?} streams request bodies",
            location.pattern
        );
    }
    assert_eq!(
        single_arg(&nginx.server, "underscores_in_headers")
            .or_else(|| single_arg(&nginx.http, "underscores_in_headers"))
            .as_deref(),
        Some("on"),
        "OTLP's `project_id` header has an underscore"
    );
}

#[test]
fn otlp_grpc_is_routed_to_the_ingest_grpc_listener() {
    let compose = Compose::load();
    let ingest = compose.service("heddle-ingest");
    let listen = role_help("ingest")
        .value(&ingest.env(), "HEDDLE_OTLP_GRPC_LISTEN")
        .expect("the ingest role has an OTLP/gRPC listen address");
    assert!(!listen.starts_with("127."), "OTLP/gRPC on {listen} is unreachable from the router");

    let router = Router::load(&compose);
    let grpc_servers: Vec<Vec<Directive>> = find(&router.http, "server")
        .into_iter()
        .map(|s| s.block.clone().unwrap())
        .filter(|s| locations(s).iter().any(|l| single_arg(&l.body, "grpc_pass").is_some()))
        .collect();
    assert_eq!(grpc_servers.len(), 1, "one router server for OTLP/gRPC");
    let server = &grpc_servers[0];
    assert_eq!(single_arg(server, "http2").as_deref(), Some("on"), "gRPC needs HTTP/2");
    assert_eq!(single_arg(server, "underscores_in_headers").as_deref(), Some("on"), "project_id");
    let port = port_of(&format!(":{}", single_arg(server, "listen").unwrap()));
    assert!(
        compose.service("router").ports().iter().any(|&(_, target)| target == port),
        "the router publishes its OTLP/gRPC port {port}"
    );
    let pass =
        single_arg(&choose_location(&locations(server), "/x").unwrap().body, "grpc_pass").unwrap();
    let upstream = pass.strip_prefix("grpc://").expect("grpc_pass grpc://...");
    let backends: Vec<String> = find(&router.http, "upstream")
        .into_iter()
        .filter(|u| u.args == [upstream])
        .flat_map(|u| {
            find(u.block.as_ref().unwrap(), "server").into_iter().map(|s| s.args[0].clone())
        })
        .collect();
    assert_eq!(backends, [format!("heddle-ingest:{}", port_of(&listen))]);
}

#[test]
fn nginx_location_choice_follows_nginx() {
    let conf = r#"http { server {
        location = /a { proxy_pass http://exact; }
        location /a { proxy_pass http://prefix; }
        location /b/ { proxy_pass http://b; }
        location ^~ /c/ { proxy_pass http://stop; }
        location ~ ^/(b|c)/x$ { proxy_pass http://regex1; }
        location ~* ^/B/X { proxy_pass http://regex2; }
        location / { proxy_pass http://root; }  # comment; with { braces }
    } }"#;
    let top = parse_nginx(conf);
    let server = find(find(&top, "http")[0].block.as_ref().unwrap(), "server")[0];
    let locations = locations(server.block.as_ref().unwrap());
    for (path, want) in [
        ("/a", "http://exact"),
        ("/ab", "http://prefix"),
        ("/b/y", "http://b"),
        ("/b/x", "http://regex1"),
        ("/c/x", "http://stop"),
        ("/b/x/", "http://regex2"),
        ("/z", "http://root"),
    ] {
        let location = choose_location(&locations, path).unwrap();
        assert_eq!(single_arg(&location.body, "proxy_pass").as_deref(), Some(want), "{path}");
    }
    for (size, bytes) in [("64m", 64 * MIB), ("32M", 32 * MIB), ("1024k", MIB), ("0", 0)] {
        assert_eq!(nginx_size(size), bytes);
    }
}

#[test]
fn kafka_topics_and_message_size() {
    let compose = Compose::load();
    let kafka = compose.service("kafka");
    assert!(kafka.image().starts_with("apache/kafka:"), "the Apache Kafka image");
    let env = kafka.env();
    let roles = env.get("KAFKA_PROCESS_ROLES").expect("KRaft process roles");
    assert!(roles.contains("broker") && roles.contains("controller"), "single-node KRaft");
    assert_eq!(env.get("KAFKA_AUTO_CREATE_TOPICS_ENABLE").map(String::as_str), Some("false"));

    // Records are cut at about HEDDLE_KAFKA_MAX_RECORD_BYTES, and may exceed it somewhat: the
    // broker must take twice that, and at least 2 MiB (docs/distributed.md).
    let ingest = compose.service("heddle-ingest");
    let record_bytes: u64 = role_help("ingest")
        .value(&ingest.env(), "HEDDLE_KAFKA_MAX_RECORD_BYTES")
        .unwrap()
        .parse()
        .unwrap();
    let needed = (2 * MIB).max(2 * record_bytes);
    let broker_max: u64 =
        env.get("KAFKA_MESSAGE_MAX_BYTES").expect("KAFKA_MESSAGE_MAX_BYTES").parse().unwrap();
    assert!(broker_max >= needed, "message.max.bytes {broker_max} < {needed}");
    if let Some(fetch) = env.get("KAFKA_REPLICA_FETCH_MAX_BYTES") {
        assert!(fetch.parse::<u64>().unwrap() >= broker_max, "replica.fetch.max.bytes");
    }

    // The topics the roles use are created, each allowing the message size.
    let mut topics = BTreeSet::new();
    for name in ["heddle-ingest", "heddle-consume"] {
        let s = compose.service(name);
        let help = role_help(&role_of(&s));
        for var in ["HEDDLE_KAFKA_TOPIC", "HEDDLE_KAFKA_DLQ_TOPIC"] {
            topics.insert(help.value(&s.env(), var).unwrap());
        }
    }
    assert!(topics.contains("heddle.calls") && topics.contains("heddle.calls.dlq"), "{topics:?}");
    // `heddle migrate` creates them (with HEDDLE_KAFKA_BROKERS set), each allowing the
    // message size, and waits for a healthy broker first.
    let migrate = compose.service("heddle-migrate");
    assert_eq!(role_of(&migrate), "migrate");
    let help = role_help("migrate");
    let menv = migrate.env();
    assert_eq!(
        help.value(&menv, "HEDDLE_KAFKA_BROKERS"),
        ingest.env().get("HEDDLE_KAFKA_BROKERS").cloned(),
        "heddle-migrate creates the topics on the brokers ingest writes to"
    );
    let mut created = BTreeSet::new();
    for var in ["HEDDLE_KAFKA_TOPIC", "HEDDLE_KAFKA_DLQ_TOPIC"] {
        created.insert(help.value(&menv, var).unwrap());
    }
    assert_eq!(created, topics, "heddle-migrate creates the topics the roles use");
    let max: u64 =
        help.value(&menv, "HEDDLE_KAFKA_TOPIC_MAX_MESSAGE_BYTES").unwrap().parse().unwrap();
    assert!(max >= needed, "topics' max.message.bytes {max} < {needed}");
    assert!(max <= broker_max, "topics' max.message.bytes {max} > the broker's {broker_max}");
    assert_eq!(
        migrate.condition_on("kafka").as_deref(),
        Some("service_healthy"),
        "heddle-migrate waits for a healthy broker"
    );

    assert!(
        kafka.volumes().iter().any(|(source, target)| target == &env["KAFKA_LOG_DIRS"]
            && compose.doc["volumes"][source.as_str()] != Yaml::BadValue),
        "Kafka's log dirs are on a named volume"
    );
}

#[test]
fn clickhouse_system_logs_expire() {
    let compose = Compose::load();
    let clickhouse = compose.service("clickhouse");
    let image = clickhouse.image();
    let tag = image.strip_prefix("clickhouse/clickhouse-server:").expect("the official image");
    let major: u32 = tag.split('.').next().unwrap().parse().expect("a numeric tag");
    assert!((25..=26).contains(&major), "ClickHouse 25.x or 26.x, not {tag}");
    let volumes = clickhouse.volumes();
    assert!(
        volumes.iter().any(|(source, target)| target == "/var/lib/clickhouse"
            && compose.doc["volumes"][source.as_str()] != Yaml::BadValue),
        "ClickHouse's data is on a named volume"
    );
    let overrides: Vec<&(String, String)> = volumes
        .iter()
        .filter(|(_, target)| target.starts_with("/etc/clickhouse-server/config.d/"))
        .collect();
    assert!(!overrides.is_empty(), "a config.d override is mounted");
    let mut text = String::new();
    for (source, _) in overrides {
        let source = source.trim_start_matches("./");
        assert!(source.starts_with("deploy/"), "ClickHouse overrides live in deploy/: {source}");
        text.push_str(&read(source));
    }
    let text = Regex::new(r"(?s)<!--.*?-->").unwrap().replace_all(&text, "");
    let ttl =
        Regex::new(r"(?s)<ttl>\s*event_date \+ INTERVAL \d+ (DAY|WEEK|MONTH)( DELETE)?\s*</ttl>")
            .unwrap();
    for table in LOG_TABLES {
        let section = Regex::new(&format!(r"(?s)<{table}>(.*?)</{table}>")).unwrap();
        let body = section
            .captures(&text)
            .unwrap_or_else(|| panic!("no <{table}> section in the ClickHouse override"))[1]
            .to_string();
        assert!(ttl.is_match(&body), "<{table}> has no event_date TTL: {body}");
        assert!(!body.contains("<engine>"), "<{table}>: an <engine> makes ClickHouse ignore <ttl>");
    }
}

#[test]
fn dockerfile_builds_heddle_and_runs_it_unprivileged() {
    let text = read("Dockerfile");
    let lines: Vec<String> = text
        .replace("\\\n", " ")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect();
    let stages: Vec<usize> =
        (0..lines.len()).filter(|&i| lines[i].to_uppercase().starts_with("FROM ")).collect();
    assert!(stages.len() >= 2, "a multi-stage build");
    let stage = |n: usize| {
        let end = stages.get(n + 1).copied().unwrap_or(lines.len());
        lines[stages[n]..end].join("\n")
    };
    let (build, runtime) = (stage(0), stage(stages.len() - 1));

    // Build stage: a Rust that knows edition 2024 and the workspace's rust-version.
    let from = Regex::new(r"^FROM rust:1\.(\d+)(?:\.\d+)?-bookworm AS (\S+)").unwrap();
    let caps = from.captures(&build).expect("FROM rust:1.N-bookworm AS <name>");
    let minor: u32 = caps[1].parse().unwrap();
    let manifest = read("Cargo.toml");
    let wanted = Regex::new(r#"rust-version = "1\.(\d+)"#).unwrap();
    let wanted: u32 = wanted.captures(&manifest).map_or(85, |c| c[1].parse().unwrap());
    assert!(minor >= wanted.max(85), "rust 1.{minor} is older than the workspace needs");
    let build_stage = caps[2].to_string();
    for pkg in ["cmake", "libcurl4-openssl-dev", "libssl-dev", "zlib1g-dev"] {
        assert!(build.contains(pkg), "the build stage installs {pkg} (librdkafka's build)");
    }
    assert!(build.contains("cargo build --release --locked -p heddle"), "a locked release build");

    // Runtime stage: the same Debian release, the libraries, curl for health checks.
    assert!(runtime.starts_with("FROM debian:bookworm-slim"), "runtime on debian:bookworm-slim");
    for pkg in ["ca-certificates", "libssl3", "libcurl4", "curl"] {
        assert!(runtime.contains(&format!(" {pkg}")), "the runtime installs {pkg}");
    }
    assert!(runtime.contains(&format!("COPY --from={build_stage} ")), "copies the built binary");
    let user = runtime
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("the runtime sets a USER");
    let user = user.split(':').next().unwrap().trim();
    assert!(user != "root" && user != "0", "runs as a non-root user, not {user}");
    assert!(runtime.contains(r#"ENTRYPOINT ["heddle"]"#), "ENTRYPOINT [\"heddle\"]");

    // Health checks run commands the image has.
    let compose = Compose::load();
    for service in compose.heddle_services() {
        if let Some(check) = service.healthcheck() {
            let tool = check.split_whitespace().find(|w| !w.starts_with("CMD")).unwrap();
            assert!(
                runtime.contains(&format!(" {tool}")),
                "{}: the image lacks {tool}",
                service.name
            );
        }
    }

    let ignore = read(".dockerignore");
    for entry in ["target", "heddle-data", ".venv", ".env"] {
        assert!(ignore.lines().any(|l| l.contains(entry)), ".dockerignore leaves out {entry}");
    }
}

#[test]
fn docker_compose_config_accepts_the_file() {
    let available = Command::new("docker")
        .args(["compose", "version"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !available {
        println!("docker compose plugin not available: skipping `docker compose config -q`");
        return;
    }
    let run = |with_secrets: bool| {
        let mut cmd = Command::new("docker");
        // `--env-file /dev/null`: a developer's `.env` must not hide a missing variable.
        cmd.current_dir(root()).args([
            "compose",
            "--env-file",
            "/dev/null",
            "-f",
            "docker-compose.yml",
            "config",
            "-q",
        ]);
        cmd.env_remove("HEDDLE_API_KEY")
            .env_remove("HEDDLE_CLICKHOUSE_PASSWORD")
            .env_remove("HEDDLE_UI_SECRET");
        if with_secrets {
            cmd.env("HEDDLE_API_KEY", "compose-test-key")
                .env("HEDDLE_CLICKHOUSE_PASSWORD", "composetestpassword")
                .env("HEDDLE_UI_SECRET", "compose-test-ui-secret-of-32-characters");
        }
        cmd.output().expect("running docker compose config")
    };
    let ok = run(true);
    assert!(ok.status.success(), "docker compose config: {}", String::from_utf8_lossy(&ok.stderr));
    let missing = run(false);
    assert!(!missing.status.success(), "docker compose config should insist on HEDDLE_API_KEY");
}
