/** The paths of the backend libraries of this package, by backend. */
declare const libraries: { readonly emu: string; readonly cuda: string };
export default libraries;
