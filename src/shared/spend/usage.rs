//! What a provider's request asks for (its model, whether it streams) and
//! what its answer says it used: a JSON body, or a stream of server-sent
//! events read as it goes, with an estimate of what a stream cut short
//! had used. Pure: fed bytes, never reading a socket.

use super::prices::Tokens;
use serde_json::Value;

/// A provider's API, as the definition names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub enum Api {
    /// Anthropic's Messages API.
    #[serde(rename = "anthropic-messages")]
    AnthropicMessages,
    /// OpenAI's Chat Completions and Responses APIs.
    #[serde(rename = "openai")]
    OpenAi,
}

impl Api {
    pub fn word(self) -> &'static str {
        match self {
            Api::AnthropicMessages => "anthropic-messages",
            Api::OpenAi => "openai",
        }
    }
}

/// What a request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    pub model: String,
    pub stream: bool,
}

/// Why a request cannot be metered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AskError {
    #[error("the request's body is not a JSON object")]
    NotJson,
    #[error("the request names no model")]
    NoModel,
}

/// Pure: the model and streaming of a request body.
pub fn asked(body: &[u8]) -> Result<Asked, AskError> {
    let value: Value = serde_json::from_slice(body).map_err(|_| AskError::NotJson)?;
    let object = value.as_object().ok_or(AskError::NotJson)?;
    let model = object
        .get("model")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .ok_or(AskError::NoModel)?;
    Ok(Asked {
        model: model.to_string(),
        stream: object.get("stream").and_then(Value::as_bool) == Some(true),
    })
}

fn count(value: &Value, path: &[&str]) -> Option<u64> {
    path.iter()
        .try_fold(value, |v, key| v.get(key))
        .and_then(Value::as_u64)
}

/// Pure: the usage an answer object reports (a whole JSON answer, or the
/// object an event carries), if it reports one.
pub fn reported(api: Api, answer: &Value) -> Option<Tokens> {
    match api {
        Api::AnthropicMessages => {
            // A whole answer, or message_start's `message`, or
            // message_delta's top-level `usage`.
            let usage = answer
                .get("usage")
                .or_else(|| answer.get("message").and_then(|m| m.get("usage")))?;
            Some(Tokens {
                input: count(usage, &["input_tokens"]).unwrap_or(0),
                output: count(usage, &["output_tokens"]).unwrap_or(0),
                cache_write: count(usage, &["cache_creation_input_tokens"]).unwrap_or(0),
                cache_read: count(usage, &["cache_read_input_tokens"]).unwrap_or(0),
            })
        }
        Api::OpenAi => {
            // Chat Completions (`usage.prompt_tokens`), or the Responses
            // API (`usage.input_tokens`, or `response.usage` in a stream's
            // `response.completed`).
            let usage = answer
                .get("usage")
                .filter(|u| !u.is_null())
                .or_else(|| answer.get("response").and_then(|r| r.get("usage")))?;
            let input = count(usage, &["prompt_tokens"]).or(count(usage, &["input_tokens"]))?;
            let cached = count(usage, &["prompt_tokens_details", "cached_tokens"])
                .or(count(usage, &["input_tokens_details", "cached_tokens"]))
                .unwrap_or(0);
            let output = count(usage, &["completion_tokens"])
                .or(count(usage, &["output_tokens"]))
                .unwrap_or(0);
            Some(Tokens {
                input: input.saturating_sub(cached),
                output,
                cache_write: 0,
                cache_read: cached,
            })
        }
    }
}

/// The text an event streams to the reader (for the estimate).
fn streamed_text(api: Api, event: &Value) -> usize {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map_or(0, str::len);
    match api {
        Api::AnthropicMessages => {
            let delta = event.get("delta");
            text(delta.and_then(|d| d.get("text")))
                + text(delta.and_then(|d| d.get("partial_json")))
                + text(delta.and_then(|d| d.get("thinking")))
        }
        Api::OpenAi => {
            let choices = event.get("choices").and_then(Value::as_array);
            let chat: usize = choices
                .into_iter()
                .flatten()
                .map(|c| text(c.get("delta").and_then(|d| d.get("content"))))
                .sum();
            chat + text(event.get("delta").filter(|_| {
                event.get("type").and_then(Value::as_str) == Some("response.output_text.delta")
            }))
        }
    }
}

/// A stream of server-sent events, read as it comes in pieces cut
/// anywhere: the usage it reported, and the text it streamed.
#[derive(Debug, Clone)]
pub struct EventStream {
    api: Api,
    pending: Vec<u8>,
    /// Reported usage, merged event by event (the last count of a kind
    /// wins: Anthropic's message_delta repeats the running output count).
    pub usage: Option<Tokens>,
    /// Bytes of text streamed so far.
    pub text_bytes: usize,
    /// Events read whole.
    pub events: u64,
}

/// The most an event may hold before the stream is judged malformed.
const MAX_EVENT: usize = 4 << 20;

impl EventStream {
    pub fn new(api: Api) -> EventStream {
        EventStream {
            api,
            pending: Vec::new(),
            usage: None,
            text_bytes: 0,
            events: 0,
        }
    }

    /// Reads `piece`; returns the offsets, within it, just after each
    /// event that ended in it (where a stream may be cut).
    pub fn feed(&mut self, piece: &[u8]) -> Vec<usize> {
        let mut ends = Vec::new();
        self.feed_until(piece, |_, end| {
            ends.push(end);
            false
        });
        ends
    }

    /// Reads `piece` event by event, asking `stop` after each (with the
    /// offset just after it in `piece`); stops there when it says so, the
    /// rest of the piece unread, and returns that offset.
    pub fn feed_until(
        &mut self,
        piece: &[u8],
        mut stop: impl FnMut(&EventStream, usize) -> bool,
    ) -> Option<usize> {
        let before = self.pending.len();
        self.pending.extend_from_slice(piece);
        let mut start = 0;
        let mut at = before.saturating_sub(3);
        while let Some((end, next)) = event_end(&self.pending, at.max(start)) {
            let (text, reported) = read_event(self.api, &self.pending[start..end]);
            self.events += 1;
            self.text_bytes += text;
            if let Some(tokens) = reported {
                self.usage = Some(merge(self.usage, tokens));
            }
            start = next;
            at = next;
            if stop(self, next - before) {
                self.pending.clear();
                return Some(next - before);
            }
        }
        self.pending.drain(..start);
        if self.pending.len() > MAX_EVENT {
            // No event ends: whatever this is, nothing of it is read.
            self.pending.clear();
        }
        None
    }

    /// What the stream used: its reported usage, with output at least the
    /// estimate from the text streamed (about four bytes a token), and
    /// input at least `input_estimate` where none was reported. Returns
    /// whether any of it is an estimate.
    pub fn used(&self, input_estimate: u64) -> (Tokens, bool) {
        let streamed = (self.text_bytes as u64).div_ceil(4);
        let mut tokens = self.usage.unwrap_or_default();
        let mut estimated = false;
        if tokens.output < streamed {
            tokens.output = streamed;
            estimated = true;
        }
        if self.usage.is_none() {
            tokens.input = input_estimate;
            estimated = true;
        }
        (tokens, estimated)
    }
}

/// Pure: one event's streamed text (bytes) and the usage it reports, read
/// from its `data:` lines (joined by newlines) as JSON. Read where it lies
/// in the stream: a single data line (every provider's events) is parsed
/// in place, and text that is not UTF-8 is read as `from_utf8_lossy` would
/// make it.
fn read_event(api: Api, event: &[u8]) -> (usize, Option<Tokens>) {
    let mut data: Vec<&[u8]> = Vec::new();
    let mut rest = event;
    while !rest.is_empty() {
        let (line, next) = match memchr::memchr(b'\n', rest) {
            Some(at) => (&rest[..at], &rest[at + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(d) = line.strip_prefix(b"data:") {
            data.push(d.strip_prefix(b" ").unwrap_or(d));
        }
        rest = next;
    }
    let joined;
    let json: &[u8] = match data.as_slice() {
        [one] => one,
        _ => {
            joined = data.join(&b'\n');
            &joined
        }
    };
    let value = match serde_json::from_slice::<Value>(json) {
        Ok(value) => value,
        Err(_) if std::str::from_utf8(json).is_err() => {
            match serde_json::from_str::<Value>(&String::from_utf8_lossy(json)) {
                Ok(value) => value,
                Err(_) => return (0, None),
            }
        }
        Err(_) => return (0, None),
    };
    (streamed_text(api, &value), reported(api, &value))
}

/// A later report over an earlier one, kind by kind: a count reported
/// again replaces the earlier (running totals), one left out (0) keeps it.
fn merge(earlier: Option<Tokens>, later: Tokens) -> Tokens {
    let e = earlier.unwrap_or_default();
    let pick = |old: u64, new: u64| if new > 0 { new } else { old };
    Tokens {
        input: pick(e.input, later.input),
        output: pick(e.output, later.output),
        cache_write: pick(e.cache_write, later.cache_write),
        cache_read: pick(e.cache_read, later.cache_read),
    }
}

/// Where the first event from `from` ends (a blank line: `\n\n`,
/// `\r\n\r\n`, or `\r\r`): (the event's end, where the next begins).
fn event_end(bytes: &[u8], from: usize) -> Option<(usize, usize)> {
    let mut i = from;
    while i + 1 < bytes.len() {
        // Only a line's end begins one: the bytes between are skipped.
        i += memchr::memchr2(b'\n', b'\r', &bytes[i..bytes.len() - 1])?;
        match (bytes[i], bytes[i + 1]) {
            (b'\n', b'\n') | (b'\r', b'\r') => return Some((i, i + 2)),
            (b'\r', b'\n') if bytes.get(i + 2..i + 4) == Some(b"\r\n") => {
                return Some((i, i + 4));
            }
            _ => i += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_names_its_model_and_whether_it_streams() {
        let cases: [(&[u8], Result<Asked, AskError>); 5] = [
            (
                br#"{"model":"m","stream":true}"#,
                Ok(Asked {
                    model: "m".into(),
                    stream: true,
                }),
            ),
            (
                br#"{"model":"m"}"#,
                Ok(Asked {
                    model: "m".into(),
                    stream: false,
                }),
            ),
            (br#"{"stream":true}"#, Err(AskError::NoModel)),
            (br#"{"model":""}"#, Err(AskError::NoModel)),
            (b"model=m", Err(AskError::NotJson)),
        ];
        for (body, want) in cases {
            assert_eq!(asked(body), want, "{}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn whole_answers_report_their_usage() {
        let t = |input, output, cache_write, cache_read| Tokens {
            input,
            output,
            cache_write,
            cache_read,
        };
        let cases = [
            (
                Api::AnthropicMessages,
                json!({"usage": {"input_tokens": 10, "output_tokens": 20, "cache_creation_input_tokens": 30, "cache_read_input_tokens": 40}}),
                Some(t(10, 20, 30, 40)),
            ),
            (
                Api::OpenAi,
                json!({"usage": {"prompt_tokens": 100, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 60}}}),
                Some(t(40, 7, 0, 60)),
            ),
            (
                Api::OpenAi,
                json!({"usage": {"input_tokens": 50, "output_tokens": 5, "input_tokens_details": {"cached_tokens": 0}}}),
                Some(t(50, 5, 0, 0)),
            ),
            (Api::OpenAi, json!({"usage": null}), None),
            (Api::AnthropicMessages, json!({"id": "x"}), None),
        ];
        for (api, answer, want) in cases {
            assert_eq!(reported(api, &answer), want, "{answer}");
        }
    }

    const ANTHROPIC_STREAM: &str = concat!(
        "event: message_start\n",
        "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1,\"cache_read_input_tokens\":100}}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello there\"}}\n\n",
        "event: message_delta\n",
        "data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n",
        "event: message_stop\n",
        "data: {\"type\":\"message_stop\"}\n\n",
    );

    #[test]
    fn a_stream_reads_the_same_however_it_is_cut() {
        let whole = {
            let mut s = EventStream::new(Api::AnthropicMessages);
            let ends = s.feed(ANTHROPIC_STREAM.as_bytes());
            assert_eq!(ends.len(), 4);
            assert_eq!(*ends.last().unwrap(), ANTHROPIC_STREAM.len());
            s
        };
        let want = Tokens {
            input: 25,
            output: 15,
            cache_write: 0,
            cache_read: 100,
        };
        assert_eq!(whole.usage, Some(want));
        assert_eq!(whole.text_bytes, 11);
        for cut in 0..ANTHROPIC_STREAM.len() {
            let mut s = EventStream::new(Api::AnthropicMessages);
            let (a, b) = ANTHROPIC_STREAM.as_bytes().split_at(cut);
            let ends = s.feed(a).len() + s.feed(b).len();
            assert_eq!(
                (s.usage, s.text_bytes, ends),
                (Some(want), 11, 4),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn openai_streams_report_usage_at_their_end_and_text_on_the_way() {
        let chat = concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":\"abcdefgh\"}}],\"usage\":null}\r\n\r\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3}}\r\n\r\n",
            "data: [DONE]\r\n\r\n",
        );
        let mut s = EventStream::new(Api::OpenAi);
        assert_eq!(s.feed(chat.as_bytes()).len(), 3);
        assert_eq!(s.text_bytes, 8);
        assert_eq!(
            s.used(0),
            (
                Tokens {
                    input: 9,
                    output: 3,
                    ..Default::default()
                },
                false
            )
        );
        let responses = concat!(
            "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"abcd\"}\n\n",
            "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":4,\"output_tokens\":2}}}\n\n",
        );
        let mut s = EventStream::new(Api::OpenAi);
        s.feed(responses.as_bytes());
        assert_eq!(s.text_bytes, 4);
        assert_eq!(
            s.usage,
            Some(Tokens {
                input: 4,
                output: 2,
                ..Default::default()
            })
        );
    }

    #[test]
    fn events_split_over_data_lines_or_not_utf8_are_read_whole() {
        // Two data lines are one JSON text; bytes that are not UTF-8 count
        // as what from_utf8_lossy makes of them (U+FFFD, three bytes).
        let mut s = EventStream::new(Api::AnthropicMessages);
        let mut stream =
            b"event: content_block_delta\r\ndata: {\"delta\":\r\ndata: {\"text\":\"abc\"}}\r\n\r\n"
                .to_vec();
        stream.extend_from_slice(b"data: {\"delta\":{\"text\":\"x\xffy\"}}\n\n");
        stream.extend_from_slice(b"data: not json\n\ndata: {\"usage\":{\"output_tokens\":9}}\n\n");
        let ends = s.feed(&stream);
        assert_eq!(ends.len(), 4);
        assert_eq!((s.events, s.text_bytes), (4, 3 + 5));
        assert_eq!(s.usage.map(|u| u.output), Some(9));
    }

    #[test]
    fn a_stream_cut_short_is_estimated_from_its_text() {
        let mut s = EventStream::new(Api::OpenAi);
        s.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"0123456789\"}}]}\n\n");
        assert_eq!(
            s.used(7),
            (
                Tokens {
                    input: 7,
                    output: 3,
                    ..Default::default()
                },
                true
            )
        );
    }
}
