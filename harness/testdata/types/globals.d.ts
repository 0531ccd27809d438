declare const console: { log(...a: unknown[]): void };
