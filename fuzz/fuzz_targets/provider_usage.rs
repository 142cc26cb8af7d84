//! A model provider's parsers, over what a runtime or a provider sends: a
//! request body's model, an answer's usage, and a stream of events cut
//! anywhere. Never panics; a stream reads the same however it is cut.
#![no_main]
use libfuzzer_sys::fuzz_target;
use warden::shared::spend::usage::{self, Api, EventStream};

fuzz_target!(|data: &[u8]| {
    let _ = usage::asked(data);
    for api in [Api::AnthropicMessages, Api::OpenAi] {
        if let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) {
            let _ = usage::reported(api, &value);
        }
        let mut whole = EventStream::new(api);
        let events = whole.feed(data).len();
        // Cut at up to 32 places spread over the input.
        let step = (data.len() / 32).max(1);
        for cut in (0..=data.len()).step_by(step) {
            let mut s = EventStream::new(api);
            let (a, b) = data.split_at(cut);
            let n = s.feed(a).len() + s.feed(b).len();
            assert_eq!(n, events, "cut at {cut}");
            assert_eq!(s.usage, whole.usage, "cut at {cut}");
            assert_eq!(s.text_bytes, whole.text_bytes, "cut at {cut}");
        }
    }
});
