/** The path of the backend library of this package. */
declare const libraries: { readonly metal: string };
export default libraries;
