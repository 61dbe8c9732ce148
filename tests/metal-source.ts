// The tests read .metal sources with the library's own parser.
export * from '../ts/metal-source.ts';
