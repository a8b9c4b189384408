// Imported first by mapper.mjs, so that it holds before any of chromium-bidi's code runs.
//
// V8 optimizes a function once it has spent its interrupt budget (67,584 in Node 20) a few times.
// A BiDi command runs a long chain of small functions (parse, check, route, translate, answer),
// each about once, so at one command at a time much of the mapper's path stayed unoptimized for
// its first thousands of commands: bench/bidi_alone's 2,000 took 0.53-0.54 ms each at the median,
// 6,000 took 0.48-0.49. With a sixteenth of the budget it is optimized within the first ones:
// 0.50-0.51 ms over 2,000, the rest of the gap being the measuring noise. Budgets of 1,024 and
// 16,384 measured the same within noise. A long-lived mapper pays the earlier compiles once.
import { setFlagsFromString } from 'node:v8';

setFlagsFromString('--interrupt-budget=4096');
