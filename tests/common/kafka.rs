//! A real Kafka-protocol broker for tests: tansu (installed by `tests/run.sh`, path in
//! `HEDDLE_TANSU`) on a free loopback port with SQLite storage, so it can be stopped and started
//! again on the same data.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};

pub const TOPIC: &str = "heddle.calls";
pub const DLQ_TOPIC: &str = "heddle.calls.dlq";
pub const PARTITIONS: u32 = 3;
/// A topic of the tests' own, written to check that a restarted broker takes writes.
const PROBE_TOPIC: &str = "heddle.test.probe";

pub struct Kafka {
    /// `host:port`, as rdkafka's bootstrap.servers wants it.
    pub brokers: String,
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// Whether [`PROBE_TOPIC`] exists, so that a restart can be checked with a write.
    probe: bool,
    /// The length of the broker's log when it was last started: what follows is this run's.
    log_start: usize,
}

fn tansu() -> String {
    std::env::var("HEDDLE_TANSU").unwrap_or_else(|_| {
        panic!(
            "HEDDLE_TANSU is not set: run the suite with `bash tests/run.sh`, which installs tansu"
        )
    })
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("addr").port()
}

impl Kafka {
    /// Starts a broker without topics.
    pub fn start_bare() -> Kafka {
        let mut k = Kafka {
            brokers: String::new(),
            port: free_port(),
            dir: tempfile::tempdir().expect("tempdir"),
            child: None,
            probe: false,
            log_start: 0,
        };
        k.brokers = format!("127.0.0.1:{}", k.port);
        k.resume();
        k
    }

    /// Starts a broker and creates the call topic, its dead-letter topic and the probe topic.
    pub fn start() -> Kafka {
        let mut k = Kafka::start_bare();
        for (topic, partitions) in [(TOPIC, PARTITIONS), (DLQ_TOPIC, 1), (PROBE_TOPIC, 1)] {
            let out = Command::new(tansu())
                .args(["topic", "create", "--broker", &k.url(), topic])
                .args(["--partitions", &partitions.to_string()])
                .output()
                .expect("running tansu topic create");
            assert!(
                out.status.success(),
                "tansu topic create {topic}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        k.probe = true;
        k
    }

    fn url(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.port)
    }

    /// (Re)starts the broker process on the same port and data, and waits until it answers a
    /// metadata request and, once the topics exist, acknowledges a write. A broker killed
    /// mid-write has come back listening but resetting every connection, or answering every
    /// produce with an unknown error (tansu 0.6, under a loaded suite): it then gets one more
    /// restart, so that the tests judge heddle's recovery rather than the test broker's.
    pub fn resume(&mut self) {
        self.spawn();
        if !self.answers(Duration::from_secs(30)) {
            eprintln!("tansu does not answer or take writes: restarting it once\n{}", self.log());
            self.stop();
            self.spawn();
            assert!(
                self.answers(Duration::from_secs(30)),
                "tansu did not answer and take writes within 30 s: {}",
                self.log()
            );
        }
    }

    /// Whether the broker answers a metadata request, and once the topics exist acknowledges a
    /// write, before `timeout`.
    fn answers(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let client: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .create()
            .expect("a Kafka client");
        while client.fetch_metadata(None, Duration::from_secs(2)).is_err() {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        !self.probe || self.takes_writes(deadline)
    }

    /// Whether the broker acknowledges a record on [`PROBE_TOPIC`] before `deadline`.
    fn takes_writes(&self, deadline: Instant) -> bool {
        let producer: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .set("message.timeout.ms", "2000")
            .create()
            .expect("a Kafka producer");
        while Instant::now() < deadline {
            let record = FutureRecord::<str, str>::to(PROBE_TOPIC).payload("probe");
            if let Ok(delivery) = producer.send_result(record)
                && matches!(futures::executor::block_on(delivery), Ok(Ok(_)))
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// Whether the broker's storage has failed since it was last started. tansu 0.6 panics in
    /// its storage task when an idempotent producer sends with an epoch it bumped itself (as
    /// librdkafka does after in-flight records time out, and Kafka allows), and then fails every
    /// request while still accepting connections. A real broker has no such defect: a test that
    /// sees this restarts the broker and the producing role, to judge heddle's recovery rather
    /// than the test broker's.
    pub fn is_broken(&self) -> bool {
        self.log().get(self.log_start..).is_some_and(|run| run.contains("panicked at"))
    }

    /// Stops the broker and starts it again on the same data (see [`Kafka::resume`]).
    pub fn restart(&mut self) {
        self.stop();
        self.resume();
    }

    fn spawn(&mut self) {
        self.log_start = self.log().len();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("tansu.log"))
            .expect("log file");
        let child = Command::new(tansu())
            .arg("broker")
            .args(["--listener-url", &self.url(), "--advertised-listener-url", &self.url()])
            // tansu resolves the SQLite path against its working directory.
            .args(["--storage-engine", "sqlite://tansu.db"])
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().expect("log handle")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("starting tansu");
        self.child = Some(child);
    }

    /// Stops the broker (SIGKILL: the data stays on disk).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("tansu.log")).unwrap_or_default()
    }
}

impl Drop for Kafka {
    fn drop(&mut self) {
        self.stop();
    }
}
