/// <reference types="vitest/config" />
import { defineConfig } from 'vite';
import { svelte } from '@sveltejs/vite-plugin-svelte';

// PETAL_DEV_SERVER is the petal serve address the dev server proxies API
// calls to, so that `npm run dev` talks to a running backend same-origin.
const backend = process.env.PETAL_DEV_SERVER ?? 'http://127.0.0.1:8080';

export default defineConfig({
  plugins: [svelte()],
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    // Hashed names under assets/ are what the Go server caches for a year.
    assetsDir: 'assets',
  },
  server: {
    proxy: {
      '/v1': { target: backend, changeOrigin: true },
      '/manage': { target: backend, changeOrigin: true },
      '/health': { target: backend, changeOrigin: true },
    },
  },
  test: {
    environment: 'jsdom',
    include: ['src/**/*.test.ts'],
  },
});
