// The `dice` section as the server receives it: the user's settings with the editor's workspace trust.
import "./register-vscode";
import { beforeEach, describe, it } from "node:test";
import * as assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import * as path from "node:path";
import { mock } from "./vscode-mock";
import { EXTENSION_SETTINGS, injectTrust, serverSettings } from "../src/settings";

// eslint-disable-next-line @typescript-eslint/no-require-imports
const manifest = require(path.join(__dirname, "..", "..", "package.json")) as {
    contributes: { configuration: { properties: Record<string, unknown> } };
};

describe("serverSettings", () => {
    beforeEach(() => mock.reset());

    it("sends every server setting with its package.json default, nested as the server reads them", () => {
        const settings = serverSettings(undefined);
        assert.equal(settings.model, "");
        assert.equal(settings.device, "auto");
        assert.equal(settings.baseline, "both");
        assert.equal(settings.solutionLocation, "sibling");
        assert.equal(settings.runOnSave, true);
        assert.deepEqual(settings.decoding, {
            blockSize: null,
            steps: 4,
            strategy: "static",
            threshold: 0.9,
            temperature: 1.0,
            topK: 1,
            topP: 1.0,
            maxNewTokens: 4096,
            confidence: "sampled",
            givenPrefix: true,
            promptTemplate: "",
        });
        assert.equal(settings.trustedWorkspace, true);
    });

    it("leaves out the extension's own settings, which the server does not read", () => {
        const declared = Object.keys(manifest.contributes.configuration.properties).map((key) => key.split(".")[1]);
        const own = declared.filter((key) => (EXTENSION_SETTINGS as readonly string[]).includes(key));
        assert.deepEqual([...new Set(own)].sort(), [...EXTENSION_SETTINGS].sort(), "each is declared in package.json");
        const settings = serverSettings(undefined);
        for (const key of EXTENSION_SETTINGS) {
            assert.ok(!(key in settings), `dice.${key} is sent to the server`);
        }
        assert.deepEqual(injectTrust([{ section: "dice" }], [{ logLevel: "debug", model: "m" }]), [
            { model: "m", trustedWorkspace: true },
        ]);
    });

    it("reports an untrusted workspace even when a settings file claims otherwise", () => {
        mock.trusted = false;
        mock.settings.set("dice.trustedWorkspace", true);
        assert.equal(serverSettings(undefined).trustedWorkspace, false);
    });
});

describe("injectTrust", () => {
    beforeEach(() => mock.reset());

    it("adds trustedWorkspace to answers for the dice section only", () => {
        mock.trusted = false;
        const answers = injectTrust(
            [{ section: "dice" }, { section: "python" }, {}],
            [{ model: "m" }, { analysis: 1 }, null],
        );
        assert.deepEqual(answers, [{ model: "m", trustedWorkspace: false }, { analysis: 1 }, null]);
    });

    it("answers the dice section with trust even when the editor had no value for it", () => {
        assert.deepEqual(injectTrust([{ section: "dice" }], [null]), [{ trustedWorkspace: true }]);
    });
});

describe("package.json's settings", () => {
    beforeEach(() => mock.reset());

    it("are the server's own keys and defaults (dice_lsp.settings.Settings.to_client)", () => {
        const repository = path.resolve(__dirname, "..", "..", "..");
        const script = "import json; from dice_lsp.settings import Settings; print(json.dumps(Settings().to_client()))";
        const server = JSON.parse(execFileSync("python3", ["-c", script], { cwd: repository, encoding: "utf8" })) as Record<
            string,
            unknown
        >;
        const client = serverSettings(undefined);
        assert.deepEqual(Object.keys(client).sort(), Object.keys(server).sort());
        for (const [key, value] of Object.entries(server)) {
            if (key !== "trustedWorkspace") {
                assert.deepEqual(client[key], value, `dice.${key}`);
            }
        }
    });
});
