// The k6 globals the type-checked scripts use.
declare const __VU: number;
declare const __ITER: number;
declare const __ENV: { [name: string]: string };
