//! Request bodies. heddle reads bodies itself rather than through axum's limit layer so that an
//! oversized body is drained (within bounds) before the 413 goes out. A chunked upload answered
//! mid-stream races the client still sending it, and the client may see a reset instead of the
//! 413 — yet the SDK splits a batch only when it sees the 413
//! (docs/api/README.md#errors-and-status-codes).
//!
//! The JSON extractor's rejections are the API's own errors: 413 above the limit, 400 with the
//! parser's message for malformed JSON or wrong types. Unknown keys are ignored and `null` reads
//! as absent (the SDK sends both, docs/api/README.md#transport-and-encoding).

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::extract::{FromRequest, Request};
use axum::http::HeaderMap;
use axum::http::header::CONTENT_ENCODING;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use serde::de::DeserializeOwned;

use crate::budget::{AdmissionSlot, Admitted, MemoryBudget, UNCHARGED_BYTES, VALUE_COST};
use crate::{ApiError, AppState};
use heddle_proto::limits::{JsonShape, MAX_JSON_DEPTH, MAX_JSON_VALUES, json_shape};

/// How much of an oversized body is read and discarded so the client gets its 413 cleanly.
const DRAIN_BYTES: usize = 64 * 1024 * 1024;
/// How long draining may take before the connection is simply closed.
const DRAIN_TIME: Duration = Duration::from_secs(10);

fn too_large(limit: usize) -> ApiError {
    ApiError::TooLarge(format!("request body is larger than the server's limit of {limit} bytes"))
}

/// Reads a whole body of at most `limit` bytes, admitted against the memory budget
/// (`crate::budget`) as it arrives: past the uncharged first 256 KiB, each time the body
/// outgrows its admission it waits for room for twice what has arrived (at most the declared
/// `Content-Length`), and only then reads on. So bodies waiting for room stay in the clients'
/// sockets instead of heddle's memory, and a client cannot hold room for more than it has sent.
/// The admission covers decoding the body too ([`DECODE_FACTOR`]).
pub async fn read_body(
    body: Body,
    limit: usize,
    declared: Option<usize>,
    budget: &MemoryBudget,
) -> Result<(Bytes, Option<Admitted>), ApiError> {
    let mut chunks = body.into_data_stream();
    let cap = declared.filter(|n| *n <= limit).unwrap_or(limit);
    let mut charged = UNCHARGED_BYTES;
    let mut admitted = None;
    let mut held = Chunks::default();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| ApiError::bad_request(format!("reading the body: {e}")))?;
        let len = held.len + chunk.len();
        if len > limit {
            return Err(drain(chunks, too_large(limit)).await);
        }
        if len > charged {
            charged = (len * 2).min(cap).max(len);
            admitted = match budget.admit_body(charged, admitted).await {
                Ok(a) => a,
                Err(e) => return Err(drain(chunks, e).await),
            };
        }
        held.push(chunk);
    }
    Ok((held.join(), admitted))
}

/// Chunks smaller than this are gathered into one.
const SMALL_CHUNK: usize = 16 * 1024;

/// A body's chunks as they arrived, joined once at the end. One buffer grown by doubling copied
/// a large body about twice over and touched fresh pages at every step: memory copies were a
/// third of the HTTP work of the ingest role (docs/benchmarks.md, "Members written directly,
/// span logs in one read, bodies joined once"). Chunks below [`SMALL_CHUNK`] are gathered as
/// they come, so a body sent a few bytes at a time holds one chunk per 16 KiB, not one per write.
#[derive(Default)]
struct Chunks {
    full: Vec<Bytes>,
    small: BytesMut,
    len: usize,
}

impl Chunks {
    fn push(&mut self, chunk: Bytes) {
        self.len += chunk.len();
        if chunk.len() >= SMALL_CHUNK {
            self.flush_small();
            self.full.push(chunk);
        } else {
            self.small.extend_from_slice(&chunk);
            if self.small.len() >= SMALL_CHUNK {
                self.flush_small();
            }
        }
    }

    fn flush_small(&mut self) {
        if !self.small.is_empty() {
            self.full.push(self.small.split().freeze());
        }
    }

    /// The body: its one chunk as it is, or the chunks copied once into a buffer of its size.
    fn join(mut self) -> Bytes {
        self.flush_small();
        if self.full.len() == 1 {
            return self.full.pop().expect("one chunk");
        }
        let mut body = BytesMut::with_capacity(self.len);
        for chunk in &self.full {
            body.extend_from_slice(chunk);
        }
        body.freeze()
    }
}

/// Reads what is left of a refused body (within bounds, keeping none of it) so that the client,
/// still sending, reads the answer `e` instead of a reset connection.
async fn drain(mut chunks: axum::body::BodyDataStream, e: ApiError) -> ApiError {
    let drain = async {
        let mut drained = 0usize;
        while let Some(Ok(chunk)) = chunks.next().await {
            drained += chunk.len();
            if drained > DRAIN_BYTES {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIME, drain).await;
    e
}

/// The body's length as the server read it from `Content-Length`, when the client sent one.
fn declared_length(req: &Request) -> Option<usize> {
    req.body().size_hint().exact().and_then(|n| usize::try_from(n).ok())
}

/// How a body is compressed (`Content-Encoding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Identity,
    Gzip,
}

impl Encoding {
    pub fn from_headers(headers: &HeaderMap) -> Result<Encoding, ApiError> {
        match headers.get(CONTENT_ENCODING).map(|v| v.to_str().unwrap_or("?").trim()) {
            None | Some("" | "identity") => Ok(Encoding::Identity),
            Some(e) if e.eq_ignore_ascii_case("gzip") => Ok(Encoding::Gzip),
            Some(e) => Err(ApiError::bad_request(format!(
                "unsupported Content-Encoding {e:?}: send gzip or an uncompressed body"
            ))),
        }
    }

    /// The decoded body, at most `limit` bytes after decompression: a gzip bomb is cut off at
    /// the limit (413) instead of being inflated into memory. `reserve(n)` is called before the
    /// decoded body may grow to `n` bytes, and may refuse (the memory budget,
    /// [`admit_and_decode`]). CPU-bound for large bodies, so hot paths call it off the async
    /// reactor.
    pub fn decode(
        self,
        body: Bytes,
        limit: usize,
        reserve: &mut dyn FnMut(usize) -> Result<(), ApiError>,
    ) -> Result<Bytes, ApiError> {
        match self {
            Encoding::Identity => Ok(body),
            Encoding::Gzip => inflate(&body, limit, reserve),
        }
    }
}

/// What a gzip body inflates into beyond its stated size is read in pieces of this size.
const INFLATE_PIECE: usize = 1 << 20;

/// A gzip body inflated, at most `limit` bytes.
///
/// The trailer of a gzip member states its size (modulo 4 GiB), and a body is at least as large
/// as its last member: a body whose last member states more than the limit is refused before
/// anything is inflated (a gzip bomb as compressors write it). The stated size is read into one
/// buffer of that size: all of an honest body of one member. Anything beyond it (the other
/// members of a body of several, or a trailer that lies) is read in pieces of 1 MiB, joined as
/// a body's chunks are ([`Chunks`]) and only if the whole stays within the limit, so a body
/// refused at the limit never held one block of the limit's size: freed, such blocks stayed
/// resident on every thread that had held one (docs/benchmarks.md, "Members written directly,
/// span logs in one read, bodies joined once"). Each buffer is reserved (`reserve`, the
/// memory budget) before it is allocated, so many such bodies at once wait for room or are
/// turned away instead of each inflating up to the limit.
fn inflate(
    body: &[u8],
    limit: usize,
    reserve: &mut dyn FnMut(usize) -> Result<(), ApiError>,
) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::TooLarge(format!(
            "decompressed request body is larger than the server's limit of {limit} bytes"
        ))
    };
    // A gzip member starts with 1f 8b and is at least 18 bytes; anything else is left to the
    // decoder to refuse.
    let gzip = body.len() >= 18 && body.starts_with(&[0x1f, 0x8b]);
    let stated = gzip.then(|| {
        let at = body.len() - 4;
        u32::from_le_bytes(body[at..].try_into().expect("four bytes")) as usize
    });
    if stated.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let mut decoder = flate2::read::MultiGzDecoder::new(body).take(limit as u64 + 1);
    // One byte more than stated, so that an honest body ends within it.
    let first = stated.map_or(0, |n| n + 1);
    reserve(first)?;
    let mut out = vec![0; first];
    let filled = read_full(&mut decoder, &mut out)?;
    if filled < out.len() {
        out.truncate(filled);
        return Ok(out.into());
    }
    let mut held = Chunks::default();
    held.push(out.into());
    loop {
        reserve((held.len + INFLATE_PIECE).min(limit + 1))?;
        let mut piece = vec![0; INFLATE_PIECE];
        let n = read_full(&mut decoder, &mut piece)?;
        if held.len + n > limit {
            return Err(too_large());
        }
        piece.truncate(n);
        held.push(piece.into());
        if n < INFLATE_PIECE {
            return Ok(held.join());
        }
    }
}

/// Fills `buf` from `r` as far as `r` goes; how much was read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> Result<usize, ApiError> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ApiError::bad_request(format!("invalid gzip body: {e}"))),
        }
    }
    Ok(filled)
}

/// A request body within the size limit, with its encoding, not yet decompressed, and the room
/// it was admitted for.
pub struct EncodedBody {
    pub bytes: Bytes,
    pub encoding: Encoding,
    pub admitted: Option<Admitted>,
}

impl FromRequest<Arc<AppState>> for EncodedBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, Self::Rejection> {
        let encoding = Encoding::from_headers(req.headers())?;
        let declared = declared_length(&req);
        let (bytes, admitted) =
            read_body(req.into_body(), state.max_body_bytes, declared, &state.memory_budget)
                .await?;
        Ok(EncodedBody { bytes, encoding, admitted })
    }
}

/// A JSON request body (gzip accepted).
pub struct Json<T>(pub T);

impl<T: DeserializeOwned + Send + 'static> FromRequest<Arc<AppState>> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, Self::Rejection> {
        JsonBody::from_request(req, state).await?.parse_with(parse).await.map(Json)
    }
}

/// A JSON request body, decoded and admitted against the memory budget, for a handler that parses
/// it its own way ([`JsonBody::parse_with`]).
pub struct JsonBody {
    bytes: Bytes,
    /// Held until the body is parsed, where the server provides no slot to hold it until the
    /// handler answers.
    admitted: Option<Admitted>,
}

impl FromRequest<Arc<AppState>> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, Self::Rejection> {
        let slot = req.extensions().get::<AdmissionSlot>().cloned();
        let body = EncodedBody::from_request(req, state).await?;
        // Small bodies are parsed where they arrive, uncharged.
        if body.bytes.len() <= UNCHARGED_BYTES && body.encoding == Encoding::Identity {
            return Ok(JsonBody { bytes: body.bytes, admitted: None });
        }
        let (bytes, admitted) = admit_and_decode(state, body).await?;
        let (bytes, admitted) = admit_json_shape(state, bytes, admitted, |_| Ok(())).await?;
        // Held until the handler answers (what is parsed lives that long), where the server
        // provides a slot; else until the body is parsed.
        match slot {
            Some(slot) => {
                slot.keep(admitted);
                Ok(JsonBody { bytes, admitted: None })
            }
            None => Ok(JsonBody { bytes, admitted: Some(admitted) }),
        }
    }
}

impl JsonBody {
    /// Parses the body with `parse`: where it is if it is small, else on the blocking pool, so a
    /// 30 MiB parse never holds up an async worker (and `/health` with it).
    pub async fn parse_with<T: Send + 'static>(
        self,
        parse: impl FnOnce(&[u8]) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let JsonBody { bytes, admitted } = self;
        if admitted.is_none() && bytes.len() <= UNCHARGED_BYTES {
            return parse(&bytes);
        }
        let parsed = blocking(move || parse(&bytes)).await;
        drop(admitted);
        parsed
    }
}

/// Charges a JSON body by its shape before it is parsed (the body's bytes twice, and
/// [`VALUE_COST`] for each value): what a body parses into depends on how many values it holds
/// more than on its bytes. Counted on the blocking pool; a body of more than
/// [`MAX_JSON_VALUES`] values, or one whose shape `refuse` refuses (an endpoint's own bounds),
/// is refused before it is charged.
pub async fn admit_json_shape(
    state: &AppState,
    bytes: Bytes,
    admitted: Option<Admitted>,
    refuse: impl FnOnce(&JsonShape) -> Result<(), ApiError> + Send + 'static,
) -> Result<(Bytes, Admitted), ApiError> {
    let (bytes, shape) = blocking(move || {
        let shape = json_shape(&bytes, MAX_JSON_DEPTH);
        if shape.values > MAX_JSON_VALUES {
            return Err(ApiError::bad_request(format!(
                "the body holds more than {MAX_JSON_VALUES} JSON values"
            )));
        }
        refuse(&shape)?;
        Ok((bytes, shape))
    })
    .await?;
    let cost = bytes.len() * 2 + shape.values * VALUE_COST;
    Ok((bytes, state.memory_budget.admit(cost, admitted).await?))
}

/// Decompresses a body within the memory budget (`crate::budget`), on the blocking pool; the
/// admission covers parsing what comes out, and is held until the caller drops it.
pub async fn admit_and_decode(
    state: &AppState,
    body: EncodedBody,
) -> Result<(Bytes, Option<Admitted>), ApiError> {
    decode_within(&state.memory_budget, state.max_body_bytes, body).await
}

async fn decode_within(
    budget: &MemoryBudget,
    limit: usize,
    body: EncodedBody,
) -> Result<(Bytes, Option<Admitted>), ApiError> {
    let admitted = body.admitted;
    if body.encoding == Encoding::Identity {
        return Ok((body.bytes, admitted));
    }
    // Inflation reserves room before each buffer it allocates, waiting on the budget from the
    // blocking pool; the room covers parsing what comes out, as a body read plain is charged.
    let budget = budget.clone();
    let runtime = tokio::runtime::Handle::current();
    blocking(move || {
        let mut admitted = admitted;
        let mut reserve = |len: usize| {
            admitted = runtime.block_on(budget.admit_body(len, admitted.take()))?;
            Ok(())
        };
        let bytes = body.encoding.decode(body.bytes, limit, &mut reserve)?;
        Ok::<_, ApiError>((bytes, admitted))
    })
    .await
}

/// Runs CPU-bound request work (decoding, digesting) on the blocking pool.
pub async fn blocking<T: Send + 'static, E: Into<ApiError> + Send + 'static>(
    work: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, ApiError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result.map_err(Into::into),
        Err(e) => Err(ApiError::Internal(format!("request work failed: {e}"))),
    }
}

/// A raw request body within the size limit (for multipart uploads), admitted against the
/// memory budget until the handler answers.
pub struct RawBody(pub Bytes);

impl FromRequest<Arc<AppState>> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, Self::Rejection> {
        let slot = req.extensions().get::<AdmissionSlot>().cloned();
        let declared = declared_length(&req);
        let (bytes, admitted) =
            read_body(req.into_body(), state.max_body_bytes, declared, &state.memory_budget)
                .await?;
        if let (Some(slot), Some(admitted)) = (slot, admitted) {
            slot.keep(admitted);
        }
        Ok(RawBody(bytes))
    }
}

/// A JSON body as text, checked as UTF-8 in one pass. `serde_json` reading bytes checks each
/// string it meets on its own, which was 6% of reading a calls batch (`calls_parse`,
/// docs/benchmarks.md). Both refuse the same bodies: outside its strings JSON is ASCII.
pub fn body_text(bytes: &[u8]) -> Result<&str, ApiError> {
    simdutf8::basic::from_utf8(bytes)
        .map_err(|_| ApiError::BadRequest("invalid request body: it is not UTF-8".into()))
}

pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_str(body_text(bytes)?)
        .map_err(|e| ApiError::BadRequest(format!("invalid request body: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunked(chunks: usize, size: usize) -> Body {
        let stream = futures::stream::iter(
            (0..chunks).map(move |_| Ok::<_, std::io::Error>(Bytes::from(vec![b'x'; size]))),
        );
        Body::from_stream(stream)
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(bytes).unwrap();
        gz.finish().unwrap()
    }

    /// Checking the body as UTF-8 before parsing it refuses what parsing bytes refused, with a
    /// reason, and reads the rest the same.
    #[test]
    fn bodies_are_parsed_as_utf8_text() {
        for bad in [&b"{\"a\": \"\xff\"}"[..], b"{\"a\": 1}\xc3", b"[\"\xed\xa0\x80\"]"] {
            assert!(serde_json::from_slice::<serde_json::Value>(bad).is_err());
            match parse::<serde_json::Value>(bad) {
                Err(ApiError::BadRequest(reason)) => assert!(reason.contains("UTF-8"), "{reason}"),
                other => panic!("{other:?}"),
            }
        }
        let good = "{\"a\": \"r\u{e9}sum\u{e9} \\u00e9\", \"b\": [1, 2.5, null]}";
        assert_eq!(
            parse::<serde_json::Value>(good.as_bytes()).unwrap(),
            serde_json::from_slice::<serde_json::Value>(good.as_bytes()).unwrap()
        );
    }

    #[test]
    fn gzip_bodies_inflate_up_to_the_limit_and_no_further() {
        let limit = 1 << 20;
        let mut rng = fastrand::Rng::with_seed(5);
        for len in [0, 1, 1000, 65_536, 65_537, 300_000, limit - 1, limit] {
            let plain: Vec<u8> = (0..len).map(|_| rng.u8(b'a'..=b'd')).collect();
            assert_eq!(inflate(&gzip(&plain), limit, &mut |_| Ok(())).unwrap(), plain, "{len}");
        }
        for len in [limit + 1, 64 * limit] {
            let refused = inflate(&gzip(&vec![b' '; len]), limit, &mut |_| Ok(()));
            assert!(matches!(refused, Err(ApiError::TooLarge(_))), "{len}");
        }
        // A bomb whose trailer understates its size is inflated to the limit and no further.
        let mut liar = gzip(&vec![b' '; 8 * limit]);
        let at = liar.len() - 4;
        liar[at..].copy_from_slice(&100u32.to_le_bytes());
        assert!(matches!(inflate(&liar, limit, &mut |_| Ok(())), Err(ApiError::TooLarge(_))));
        // Members after the first are inflated too, past the last one's stated size in pieces.
        let (a, b) = (vec![b'a'; 3 * INFLATE_PIECE + 7], vec![b'b'; 300]);
        let two = [gzip(&a), gzip(&b)].concat();
        assert_eq!(
            inflate(&two, 8 * INFLATE_PIECE, &mut |_| Ok(())).unwrap(),
            [&a[..], &b[..]].concat()
        );
        assert!(matches!(
            inflate(&two, 3 * INFLATE_PIECE, &mut |_| Ok(())),
            Err(ApiError::TooLarge(_))
        ));
        assert!(matches!(
            inflate(b"not gzip", limit, &mut |_| Ok(())),
            Err(ApiError::BadRequest(_))
        ));
    }

    /// A gzip body that inflates past its stated size (a trailer that lies, or several members)
    /// reserves room in the memory budget before each buffer it inflates into, so it waits for
    /// room and is turned away with 503 instead of inflating up to the limit first; the room
    /// covers parsing what came out.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn inflation_is_reserved_against_the_memory_budget() {
        let limit = 32 * INFLATE_PIECE;
        let mut liar = gzip(&vec![b' '; 8 * INFLATE_PIECE]);
        let at = liar.len() - 4;
        liar[at..].copy_from_slice(&100u32.to_le_bytes());
        let encoded = |bytes: &[u8]| EncodedBody {
            bytes: Bytes::copy_from_slice(bytes),
            encoding: Encoding::Gzip,
            admitted: None,
        };
        // Each buffer is reserved before it is allocated, never past the limit.
        let mut asked = Vec::new();
        let refused = inflate(&liar, 4 * INFLATE_PIECE, &mut |n| {
            asked.push(n);
            Ok(())
        });
        assert!(matches!(refused, Err(ApiError::TooLarge(_))));
        assert_eq!(
            asked,
            [
                101,
                INFLATE_PIECE + 101,
                2 * INFLATE_PIECE + 101,
                3 * INFLATE_PIECE + 101,
                4 * INFLATE_PIECE + 1
            ]
        );

        // A body of two members grows past its last member's stated size the same way.
        let two = [gzip(&vec![b'a'; 8 * INFLATE_PIECE]), gzip(b"b")].concat();
        let budget = MemoryBudget::new(64 * INFLATE_PIECE);
        let (bytes, held) = decode_within(&budget, limit, encoded(&two)).await.unwrap();
        assert_eq!(bytes.len(), 8 * INFLATE_PIECE + 1);
        assert!(held.unwrap().bytes() >= bytes.len() * crate::budget::DECODE_FACTOR);
        // With most of the budget taken, both get 503 (after the admission wait).
        let _most = budget.admit(60 * INFLATE_PIECE, None).await.unwrap();
        let busy = [&two, &liar].map(|body| decode_within(&budget, limit, encoded(body)));
        for busy in futures::future::join_all(busy).await {
            assert!(matches!(busy, Err(ApiError::Overloaded(_))));
        }
    }

    #[tokio::test]
    async fn bodies_read_back_byte_for_byte_whatever_their_chunks() {
        let budget = MemoryBudget::new(64 * 1024 * 1024);
        let mut rng = fastrand::Rng::with_seed(3);
        for _ in 0..50 {
            let sizes: Vec<usize> = (0..rng.usize(0..40))
                .map(|_| if rng.bool() { rng.usize(0..100) } else { rng.usize(0..70_000) })
                .collect();
            let chunks: Vec<Bytes> = sizes
                .iter()
                .map(|n| Bytes::from((0..*n).map(|_| rng.u8(..)).collect::<Vec<u8>>()))
                .collect();
            let sent: Vec<u8> = chunks.concat();
            let stream = futures::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>));
            let (read, _) =
                read_body(Body::from_stream(stream), 8 << 20, None, &budget).await.unwrap();
            assert_eq!(read, sent);
        }
    }

    #[tokio::test]
    async fn bodies_are_admitted_before_they_are_held() {
        let budget = MemoryBudget::new(64 * 1024 * 1024);
        let limit = 32 * 1024 * 1024;
        // A declared length is admitted up front, for decoding too.
        let (bytes, held) =
            read_body(chunked(8, 128 * 1024), limit, Some(1024 * 1024), &budget).await.unwrap();
        assert_eq!(bytes.len(), 1024 * 1024);
        assert_eq!(held.unwrap().bytes(), 1024 * 1024 * crate::budget::DECODE_FACTOR);
        // A body of unknown length is admitted as it grows: small ones not at all.
        let (_, held) = read_body(chunked(2, 64 * 1024), limit, None, &budget).await.unwrap();
        assert!(held.is_none());
        let (bytes, held) = read_body(chunked(24, 128 * 1024), limit, None, &budget).await.unwrap();
        assert_eq!(bytes.len(), 3 * 1024 * 1024);
        assert!(held.unwrap().bytes() >= bytes.len() * crate::budget::DECODE_FACTOR);
        // With the budget taken, a large body is refused with 503, a small one still read.
        let _all = budget.admit(64 * 1024 * 1024, None).await.unwrap();
        tokio::time::pause();
        let refused = read_body(chunked(8, 128 * 1024), limit, Some(1024 * 1024), &budget).await;
        assert!(matches!(refused, Err(ApiError::Overloaded(_))));
        let refused = read_body(chunked(8, 128 * 1024), limit, None, &budget).await;
        assert!(matches!(refused, Err(ApiError::Overloaded(_))));
        let (small, _) = read_body(chunked(1, 1024), limit, Some(1024), &budget).await.unwrap();
        assert_eq!(small.len(), 1024);
    }
}
