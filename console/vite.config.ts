import { defineConfig } from "vite";

// Static build into dist/ with relative asset paths, so the files can be served from any path
// (`make run` serves them on http://127.0.0.1:8081; the tests serve them from a temporary port).
export default defineConfig({
  base: "./",
  build: { outDir: "dist", emptyOutDir: true, sourcemap: true, target: "es2022" },
});
