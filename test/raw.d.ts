// Vite's `?raw` imports (a file's text as a string), as the workers tests use them to read the docs.
declare module "*.md?raw" {
  const text: string;
  export default text;
}
