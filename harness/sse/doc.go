// Package sse is the harness's Server-Sent Events client, importable as
// k6/x/sse (the API of the community xk6-sse extension) and as
// k6/experimental/sse:
//
//	import sse from 'k6/x/sse';
//	const res = sse.open(url, { method: 'POST', body, headers }, (client) => {
//	  client.on('open', () => {});
//	  client.on('event', (e) => { if (e.data === '[DONE]') client.close(); });
//	  client.on('error', (e) => console.error(e.error()));
//	});
//
// open blocks the VU until the stream ends or a handler calls
// client.close(); handlers run on the VU's goroutine, one event at a
// time. Each stream emits:
//
//   - sse_event (Counter): one per event received;
//   - sse_time_to_first_event (Trend, time): from sending the request to
//     the first event, the time to first token of a streaming LLM call;
//   - sse_event_interval (Trend, time): the gap between an event and the
//     one before it in the same stream, the inter-token latency;
//   - http_reqs and http_req_duration (the whole stream), data_received,
//     tagged as k6/http tags a request.
package sse
