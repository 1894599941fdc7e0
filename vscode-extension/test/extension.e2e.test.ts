// The bundled extension (dist/extension.js) activated against the real server, `python3 -m dice_lsp`, run from
// this repository: it starts the server, syncs an opened document and shows the server's diagnostics for it.
import "./register-vscode";
import { after, before, describe, it } from "node:test";
import * as assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { Diagnostic, EventEmitter, mock, Uri } from "./vscode-mock";
import { extensionContext } from "./fixtures";

const repository = path.resolve(__dirname, "..", "..", "..");
const bundle = path.resolve(__dirname, "..", "..", "dist", "extension.js");
const SERVER_TIMEOUT_MS = 90_000;

// A solution that compiles a CUDA kernel and then never calls it: forward falls back to torch.matmul, and there is
// no reference `Model` to check it against.
const DECEPTIVE_SOLUTION = `import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
__global__ void scale_kernel(const float* x, float* y, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * s;
}

torch::Tensor scale(torch::Tensor x, double s) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), (float)s, n);
    return y;
}
"""

cpp_source = "torch::Tensor scale(torch::Tensor x, double s);"

scale = load_inline(name="scale", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["scale"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)
`;

interface Extension {
    activate(context: { subscriptions: { dispose(): unknown }[] }): Promise<void>;
    deactivate(): Promise<void>;
}

/** The first non-empty `dice` diagnostics published for `uri`; fails with the extension's log after the timeout. */
function diceDiagnostics(uri: string): Promise<Diagnostic[]> {
    return new Promise((resolve, reject) => {
        const onSet = (target: string, diagnostics: Diagnostic[]) => {
            if (target === uri && diagnostics.some((d) => d.source === "dice")) {
                clearTimeout(timer);
                mock.diagnosticEvents.off("set", onSet);
                resolve(diagnostics);
            }
        };
        const timer = setTimeout(() => {
            mock.diagnosticEvents.off("set", onSet);
            reject(new Error(`no dice diagnostics for ${uri}; the extension's log:\n${mock.output()}`));
        }, SERVER_TIMEOUT_MS);
        mock.diagnosticEvents.on("set", onSet);
    });
}

/** Resolves once `condition` holds (checked after each `poll`); fails with `message` after the timeout. */
async function until(condition: () => boolean, message: string, poll?: () => Promise<void>): Promise<void> {
    const deadline = Date.now() + SERVER_TIMEOUT_MS;
    while ((await poll?.(), !condition())) {
        if (Date.now() > deadline) {
            throw new Error(message);
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
    }
}

/** A suite's activated extension: its temporary folder (which holds its global storage) and its context. */
interface Activated {
    folder: string;
    context: ReturnType<typeof extensionContext>;
}

/**
 * Activates the bundled extension before the suite's tests, once `prepare` has set the stand-in up (after a reset;
 * given the suite's temporary folder), and deactivates it after them.
 */
function activated(prepare: (folder: string) => void): Activated {
    const state = {} as Activated;
    let extension: Extension;
    before(async () => {
        mock.reset();
        state.folder = fs.mkdtempSync(path.join(os.tmpdir(), "dice-vscode-"));
        state.context = extensionContext(path.join(state.folder, "storage"));
        prepare(state.folder);
        // eslint-disable-next-line @typescript-eslint/no-require-imports
        extension = require(bundle) as Extension;
        await extension.activate(state.context);
    });
    after(async () => {
        await extension.deactivate();
        state.context.subscriptions.forEach((item) => item.dispose());
        fs.rmSync(state.folder, { recursive: true, force: true });
    });
    return state;
}

describe("the bundled extension with the real dice-lsp server", { timeout: 4 * SERVER_TIMEOUT_MS }, () => {
    // The repository is the workspace: the server runs there, so `-m dice_lsp` finds this checkout.
    const suite = activated(() => {
        mock.workspaceFolders = [{ uri: Uri.file(repository), name: "dice-lsp", index: 0 }];
    });

    it("launches `python3 -m dice_lsp` when no interpreter is configured", () => {
        assert.match(mock.output(), /starting the server \(activation\): python3 -m dice_lsp/);
        assert.doesNotMatch(mock.statusItems[0].text, /error|stopped/, mock.output());
    });

    it("shows the server's diagnostics for a solution that compiles a kernel and calls torch instead", async () => {
        const file = path.join(suite.folder, "matmul_dice.py");
        fs.writeFileSync(file, DECEPTIVE_SOLUTION);
        const published = diceDiagnostics(Uri.file(file).toString());
        mock.openDocument(file, DECEPTIVE_SOLUTION);
        const diagnostics = await published;
        assert.ok(diagnostics.some((d) => d.source === "dice"));
        const codes = diagnostics.map((d) => (typeof d.code === "object" ? d.code.value : d.code));
        assert.ok(codes.includes("torch-fallback"), `codes: ${codes.join(", ")}`);
    });

    it("shows the state the server reports in the status item", async () => {
        const item = mock.statusItems[0];
        await until(() => item.text !== "DICE starting", `the server reported no state; the log:\n${mock.output()}`);
        assert.equal(item.text, "DICE ready");
        assert.match(item.detail ?? "", /^no model loaded/);
        assert.equal(item.busy, false);
    });

    it("exposes the server's commands to the client commands", () => {
        for (const command of ["dice.server.generate", "dice.server.infill", "dice.server.benchmark"]) {
            assert.ok(mock.commands.has(command), `the server does not offer ${command}`);
        }
    });

    it("shows once why a command did not start: the server's word, or the extension's where it gave none", async () => {
        const plain = path.join(suite.folder, "plain.py");
        fs.writeFileSync(plain, "x = 1\n");
        mock.openDocument(plain, "x = 1\n");
        // No class Model: the server refuses Generate and says why itself.
        mock.messages = [];
        const generate = (await mock.commands.get("dice.generate")?.()) as { ok: boolean; message: string };
        assert.equal(generate.ok, false);
        assert.deepEqual(mock.messages.map((m) => m.text), [`dice-lsp: ${generate.message}`]);
        // No ModelNew: the server answers Benchmark with why it did not start, and shows nothing.
        mock.messages = [];
        const benchmark = (await mock.commands.get("dice.benchmark")?.()) as { started: boolean; message: string };
        assert.equal(benchmark.started, false);
        assert.deepEqual(mock.messages.map((m) => m.text), [`DICE: Benchmark now: ${benchmark.message}`]);
    });

    it("tells the running server about other settings changes, without a restart", async () => {
        const starts = mock.output().match(/starting the server/g)?.length;
        // A value the server cannot use is named in a warning: the running server read the change. (Diagnostics show
        // nothing: the server's are pulled now, and a re-analysis that changes none answers "unchanged".)
        mock.setSetting("dice.tolerance", -1);
        await until(() => mock.messages.some((m) => m.text.includes("tolerance")),
            `the server said nothing of dice.tolerance; the extension's log:\n${mock.output()}`);
        assert.equal(mock.output().match(/starting the server/g)?.length, starts);
    });

    it("pops none of the server's messages up with dice.showNotifications off, and logs them", async () => {
        mock.setSetting("dice.showNotifications", "off");
        mock.messages = [];
        mock.setSetting("dice.timingTrials", 0);
        await until(() => /\[warning\] dice-lsp: some settings were not used: dice\.timingTrials/.test(mock.output()),
            `the server said nothing of dice.timingTrials; the extension's log:\n${mock.output()}`);
        assert.deepEqual(mock.messages, []);
        mock.setSetting("dice.showNotifications", "always");
    });

    it("restarts the server with a newly configured interpreter, which sees the open document again", async () => {
        const python = execFileSync("python3", ["-c", "import sys; print(sys.executable)"], { encoding: "utf8" }).trim();
        const uri = mock.documents[0].uri.toString();
        const restarted = new RegExp(`starting the server \\(launch settings changed\\): ${python} -m dice_lsp`);
        mock.setSetting("dice.interpreter", python);
        // The restart first, then the new server's diagnostics: the old server's last publication (the settings the
        // test before changed) could otherwise stand for them, and did once, 0.2 s in, on CI
        await until(() => restarted.test(mock.output()), `no restart with ${python}; the log:\n${mock.output()}`);
        mock.diagnostics.clear();
        await diceDiagnostics(uri);
    });

    it("writes no debug records of the server at the default log level", () => {
        assert.doesNotMatch(mock.output(), / DEBUG /);
    });
});

describe("the server shipped with the extension, end to end", { timeout: 4 * SERVER_TIMEOUT_MS }, () => {
    const suite = activated((folder) => {
        // A workspace of its own: in this repository's folder, `-m dice_lsp` would import the checkout first.
        mock.workspaceFolders = [{ uri: Uri.file(folder), name: "project", index: 0 }];
        mock.settings.set("dice.importStrategy", "useBundled");
        mock.settings.set("dice.logLevel", "debug");
    });

    it("runs python3 -m dice_lsp from the wheel extracted into the extension's storage", async () => {
        const started = /starting the server \(activation\): python3 -m dice_lsp --log-level DEBUG .*useBundled/;
        assert.match(mock.output(), started);
        const version = suite.context.extension.packageJSON.version;
        const extracted = path.join(suite.folder, "storage", "bundled", version, "dice_lsp");
        assert.ok(mock.output().includes(`dice_lsp from ${extracted}`), mock.output());
        const file = path.join(suite.folder, "matmul_dice.py");
        fs.writeFileSync(file, DECEPTIVE_SOLUTION);
        const published = diceDiagnostics(Uri.file(file).toString());
        mock.openDocument(file, DECEPTIVE_SOLUTION);
        const codes = (await published).map((d) => (typeof d.code === "object" ? d.code.value : d.code));
        assert.ok(codes.includes("torch-fallback"), `codes: ${codes.join(", ")}`);
    });

    it("writes the server's debug records to the DICE output channel with dice.logLevel debug", () => {
        assert.match(mock.output(), / DEBUG /);
    });
});

describe("workspace trust, end to end", { timeout: 4 * SERVER_TIMEOUT_MS }, () => {
    const suite = activated(() => {
        mock.trusted = false;
        mock.workspaceFolders = [{ uri: Uri.file(repository), name: "dice-lsp", index: 0 }];
    });

    /** The server's answer to Benchmark now on the open file: why it did not start a check. */
    async function benchmark(): Promise<string> {
        const result = (await mock.commands.get("dice.benchmark")?.()) as { started: boolean; message: string };
        assert.equal(result.started, false);
        return result.message;
    }

    it("builds nothing until the workspace is trusted, and the server learns of the grant without a restart", async () => {
        // No reference beside it: once trusted, the server stops before building, for want of a reference.
        const file = path.join(suite.folder, "scale_dice.py");
        fs.writeFileSync(file, DECEPTIVE_SOLUTION);
        const published = diceDiagnostics(Uri.file(file).toString());
        mock.openDocument(file, DECEPTIVE_SOLUTION);
        await published;

        mock.messages = [];
        assert.match(await benchmark(), /not trusted/);
        // The server says why itself, each time it is asked; the extension adds nothing.
        assert.equal(mock.messages.length, 1, mock.messages.map((m) => m.text).join("\n"));
        assert.ok(mock.messages.some((m) => m.kind === "warning" && /not trusted/.test(m.text)), mock.output());

        mock.grantTrust();
        let message = "";
        await until(
            () => !/not trusted/.test(message),
            `the server still thinks the workspace is untrusted; the log:\n${mock.output()}`,
            async () => {
                message = await benchmark();
            },
        );
        assert.match(message, /no reference/);
        assert.doesNotMatch(mock.output(), /starting the server \(workspace trusted\)/);
    });
});

// The interpreter's environment (sys.prefix: a venv's folder, or the installation's), and its path inside it.
const ENVIRONMENT = "import os, sys; print(sys.prefix); print(os.path.relpath(sys.executable, sys.prefix))";

describe("the Python extension's interpreter, end to end", { timeout: 4 * SERVER_TIMEOUT_MS }, () => {
    const changed = new EventEmitter<unknown>();
    const python = execFileSync("python3", ["-c", "import sys; print(sys.executable)"], { encoding: "utf8" }).trim();
    let selected = python;
    const suite = activated(() => {
        mock.workspaceFolders = [{ uri: Uri.file(repository), name: "dice-lsp", index: 0 }];
        const environments = {
            getActiveEnvironmentPath: () => ({ id: "selected", path: selected }),
            resolveEnvironment: async (environment: { path: string }) => ({
                executable: { uri: Uri.file(environment.path) },
            }),
            onDidChangeActiveEnvironmentPath: changed.event,
        };
        mock.extensions.set("ms-python.python", { isActive: true, exports: { environments }, activate: async () => ({ environments }) });
    });

    it("runs the server with the selected interpreter and restarts it when the selection changes", async () => {
        assert.match(mock.output(), /\[interpreter: Python extension;/);
        const file = path.join(suite.folder, "selected_dice.py");
        let published = diceDiagnostics(Uri.file(file).toString());
        mock.openDocument(file, DECEPTIVE_SOLUTION);
        await published;
        // The same interpreter by another path: a different selection to the extension, one that still runs. Its
        // whole environment is linked, not the executable alone: a venv's python3 linked into another folder no longer
        // finds the venv's pyvenv.cfg beside it, so it runs without the venv's packages.
        const [prefix, executable] = execFileSync(python, ["-c", ENVIRONMENT], { encoding: "utf8" }).trim()
            .split("\n");
        fs.symlinkSync(prefix, path.join(suite.folder, "environment"));
        selected = path.join(suite.folder, "environment", executable);
        mock.diagnostics.clear();
        published = diceDiagnostics(Uri.file(file).toString());
        changed.fire(undefined);
        await published;
        assert.ok(mock.output().includes(`starting the server (Python interpreter changed): ${selected} -m dice_lsp`), mock.output());
    });
});
