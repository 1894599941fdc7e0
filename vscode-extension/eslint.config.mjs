// Lint rules: eslint's and typescript-eslint's recommended sets, type-aware, plus floating-promise checks,
// since an unawaited client call fails silently.
import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
    { ignores: ["dist/", "out/", "node_modules/", "*.vsix"] },
    js.configs.recommended,
    ...tseslint.configs.recommendedTypeChecked,
    {
        languageOptions: {
            parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
        },
        rules: {
            "@typescript-eslint/no-floating-promises": "error",
            "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_" }],
            eqeqeq: "error",
        },
    },
    {
        // The stand-in for vscode answers with promises where the real API does, without awaiting anything;
        // node:test's describe/it return promises the runner itself awaits.
        files: ["test/**/*.ts"],
        rules: { "@typescript-eslint/require-await": "off", "@typescript-eslint/no-floating-promises": "off" },
    },
    {
        files: ["**/*.mjs"],
        extends: [tseslint.configs.disableTypeChecked],
        languageOptions: { globals: { process: "readonly" } },
    },
);
