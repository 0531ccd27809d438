// The k6 globals the type-checked scripts use.
declare const __VU: number;
declare const __ITER: number;
declare const __ENV: { [name: string]: string };
/** open(path) reads a file in the init context: a string, or with 'b' an ArrayBuffer. */
declare function open(path: string): string;
declare function open(path: string, mode: 'b'): ArrayBuffer;
