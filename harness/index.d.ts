/**
 * Type declarations of the harness's network modules: k6/http (k6's HTTP
 * client) and k6/x/sse (a Server-Sent Events client; k6/experimental/sse
 * is the same module). See docs/http.md. Point an editor at this file as
 * at xk6mocker/index.d.ts.
 */
declare module 'k6/http' {
  export type Body = string | ArrayBuffer | ArrayBufferView | Record<string, string | number | boolean | FileData> | null;
  export type URLArg = string | TaggedURL;
  export type ResponseType = 'text' | 'binary' | 'none';

  /** What http.url`` returns: the URL, named by its template. */
  export interface TaggedURL {
    url: string;
    name: string;
  }

  /** A multipart part, from http.file(). */
  export interface FileData {
    data: ArrayBuffer | string;
    filename: string;
    content_type: string;
  }

  /** What http.expectedStatuses() returns. */
  export interface ExpectedStatuses {}

  export interface Params {
    headers?: Record<string, string>;
    tags?: Record<string, string>;
    /** "30s" or milliseconds; default 60 s. */
    timeout?: string | number;
    responseType?: ResponseType;
    redirects?: number;
    /** Credentials come from the URL (http://user:pass@host). */
    auth?: 'basic' | 'digest';
    /** gzip, deflate, br, zstd, or several comma-separated (applied in order). */
    compression?: 'gzip' | 'deflate' | 'br' | 'zstd' | string;
    jar?: CookieJar;
    cookies?: Record<string, string | { value: string; replace?: boolean }>;
    responseCallback?: ExpectedStatuses | null;
  }

  export interface Timings {
    blocked: number;
    connecting: number;
    tls_handshaking: number;
    sending: number;
    waiting: number;
    receiving: number;
    duration: number;
  }

  export interface ResponseCookie {
    name: string;
    value: string;
    domain: string;
    path: string;
    http_only: boolean;
    secure: boolean;
    max_age: number;
    expires: number;
  }

  export interface RequestInfo {
    method: string;
    url: string;
    headers: Record<string, string[]>;
    body: string;
    cookies: Record<string, { name: string; value: string; replace: boolean }[]>;
  }

  export interface Response {
    status: number;
    status_text: string;
    proto: string;
    url: string;
    headers: Record<string, string>;
    cookies: Record<string, ResponseCookie[]>;
    /** A string (text), an ArrayBuffer (binary) or null (none, or a failed request). */
    body: string | ArrayBuffer | null;
    timings: Timings;
    /** '' unless the request failed. */
    error: string;
    /** k6's error code; 1000 + status for 4xx and 5xx; 0 when none. */
    error_code: number;
    tls_version: string;
    remote_ip: string;
    remote_port: number;
    request: RequestInfo;
    /** The body parsed as JSON, or the part a gjson selector picks. */
    json(selector?: string): any;
  }

  export interface CookieJar {
    cookiesForURL(url: string): Record<string, string[]>;
    set(url: string, name: string, value: string, options?: { domain?: string; path?: string; expires?: string; max_age?: number; secure?: boolean; http_only?: boolean }): void;
    clear(url: string): void;
    delete(url: string, name: string): void;
  }

  export type BatchRequest = URLArg | [string, URLArg, Body?, Params?] | { method?: string; url: URLArg; body?: Body; params?: Params };

  export function request(method: string, url: URLArg, body?: Body, params?: Params): Response;
  export function asyncRequest(method: string, url: URLArg, body?: Body, params?: Params): Promise<Response>;
  export function get(url: URLArg, params?: Params): Response;
  export function head(url: URLArg, params?: Params): Response;
  export function post(url: URLArg, body?: Body, params?: Params): Response;
  export function put(url: URLArg, body?: Body, params?: Params): Response;
  export function patch(url: URLArg, body?: Body, params?: Params): Response;
  export function del(url: URLArg, body?: Body, params?: Params): Response;
  export function options(url: URLArg, body?: Body, params?: Params): Response;
  export function batch(requests: BatchRequest[]): Response[];
  export function batch(requests: Record<string, BatchRequest>): Record<string, Response>;
  export function expectedStatuses(...statuses: (number | { min: number; max: number })[]): ExpectedStatuses;
  export function setResponseCallback(callback: ExpectedStatuses | null): void;
  export function file(data: string | ArrayBuffer, filename?: string, contentType?: string): FileData;
  export function url(strings: TemplateStringsArray, ...values: unknown[]): TaggedURL;
  export function cookieJar(): CookieJar;
  export const CookieJar: { new (): CookieJar };
  export const TLS_1_0: string;
  export const TLS_1_1: string;
  export const TLS_1_2: string;
  export const TLS_1_3: string;

  const http: {
    request: typeof request; asyncRequest: typeof asyncRequest; get: typeof get; head: typeof head;
    post: typeof post; put: typeof put; patch: typeof patch; del: typeof del; options: typeof options;
    batch: typeof batch; expectedStatuses: typeof expectedStatuses; setResponseCallback: typeof setResponseCallback;
    file: typeof file; url: typeof url; cookieJar: typeof cookieJar; CookieJar: typeof CookieJar;
  };
  export default http;
}

declare module 'k6/x/sse' {
  export interface Params {
    method?: string;
    body?: string;
    headers?: Record<string, string>;
    tags?: Record<string, string>;
  }
  export interface Event {
    id: string;
    /** The event: field; '' when absent. */
    name: string;
    data: string;
  }
  export interface ErrorEvent {
    error(): string;
  }
  export interface Client {
    on(event: 'open', handler: () => void): void;
    on(event: 'event', handler: (event: Event) => void): void;
    on(event: 'error', handler: (event: ErrorEvent) => void): void;
    close(): void;
  }
  export interface Response {
    status: number;
    headers: Record<string, string>;
    url: string;
    error: string;
  }
  export function open(url: string, params: Params, setup: (client: Client) => void): Response;
  export function open(url: string, setup: (client: Client) => void): Response;
  const sse: { open: typeof open };
  export default sse;
}

declare module 'k6/experimental/sse' {
  export * from 'k6/x/sse';
  import sse from 'k6/x/sse';
  export default sse;
}
