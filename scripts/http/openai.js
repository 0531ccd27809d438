// openai.js: a load test of an OpenAI-compatible server (mocker serve, vLLM, a Dynamo
// frontend...): streaming chat completions over Server-Sent Events, with
// time to first token and inter-token latency as Trends and thresholds on
// them.
//
//   bin/mocker serve &                      # or any OpenAI-compatible server
//   bin/mocker run -e BASE_URL=http://127.0.0.1:8000 scripts/http/openai.js
//
// Environment: BASE_URL (default http://127.0.0.1:8000, where `mocker
// serve` listens), MODEL (default: the first model the server lists at
// /v1/models), MAX_TOKENS (64), VUS (4), DURATION (30s), API_KEY (sent as
// a bearer token when set). It runs on the wall clock (a script that does
// not import k6/x/mocker gets it by default), as network load must.
import sse from 'k6/x/sse';
import http from 'k6/http';
import { check } from 'k6';
import { Trend, Counter, Rate } from 'k6/metrics';

const BASE_URL = __ENV.BASE_URL || 'http://127.0.0.1:8000';
const MODEL = __ENV.MODEL || '';
const MAX_TOKENS = Number(__ENV.MAX_TOKENS || 64);

const ttft = new Trend('llm_ttft', true);
const itl = new Trend('llm_itl', true);
const e2e = new Trend('llm_request_duration', true);
const tokens = new Counter('llm_output_tokens');
const completed = new Rate('llm_completed');

export const options = {
  scenarios: {
    chat: { executor: 'constant-vus', vus: Number(__ENV.VUS || 4), duration: __ENV.DURATION || '30s' },
  },
  thresholds: {
    llm_ttft: ['p(95)<2000'],
    llm_itl: ['p(95)<200'],
    llm_completed: ['rate>0.99'],
  },
};

const headers = { 'Content-Type': 'application/json' };
if (__ENV.API_KEY) headers.Authorization = `Bearer ${__ENV.API_KEY}`;

export function setup() {
  const r = http.get(`${BASE_URL}/v1/models`, { headers });
  check(r, { 'models listed': (r) => r.status === 200 });
  if (MODEL) return { model: MODEL };
  const listed = r.status === 200 ? r.json('data.0.id') : '';
  if (!listed) throw new Error(`${BASE_URL}/v1/models lists no model; set -e MODEL=...`);
  return { model: listed };
}

export default function (data) {
  const body = JSON.stringify({
    model: data.model,
    stream: true,
    max_tokens: MAX_TOKENS,
    messages: [{ role: 'user', content: `Say something about request ${__VU}-${__ITER}.` }],
  });
  const start = Date.now();
  let first = 0;
  let last = 0;
  let n = 0;
  let done = false;
  const res = sse.open(`${BASE_URL}/v1/chat/completions`, { method: 'POST', body, headers, tags: { name: 'chat' } }, (client) => {
    client.on('event', (e) => {
      if (e.data === '[DONE]') {
        done = true;
        client.close();
        return;
      }
      const chunk = JSON.parse(e.data);
      const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta;
      if (!delta || !delta.content) return;
      const now = Date.now();
      if (n === 0) {
        first = now;
        ttft.add(now - start);
      } else {
        itl.add(now - last);
      }
      last = now;
      n++;
    });
    client.on('error', (e) => console.error(`stream error: ${e.error()}`));
  });
  check(res, { 'status is 200': (r) => r.status === 200 });
  completed.add(done);
  if (n > 0) {
    tokens.add(n);
    e2e.add(last - start);
  }
  if (first === 0 && done) console.warn('a completion ended with no content');
}
