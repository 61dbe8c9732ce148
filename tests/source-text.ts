// The tests strip comments with the library's own stripper.
export * from '../ts/source-text.ts';
