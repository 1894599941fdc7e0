/**
 * How the server process is started: `<python> -m dice_lsp <dice.serverArgs> --log-level <dice.logLevel>`, with the
 * interpreter's own dice_lsp or, with `dice.importStrategy` useBundled, the one shipped in the extension first on
 * PYTHONPATH. The interpreter is `dice.interpreter`, else the Python extension's selection, else `python3`.
 */

import * as path from "node:path";
import * as vscode from "vscode";
import { PythonEnvironments, selectedInterpreter } from "./python";

export const FALLBACK_INTERPRETER = "python3";

export type ImportStrategy = "fromEnvironment" | "useBundled";
export const LOG_LEVELS = ["error", "warning", "info", "debug"] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export interface LaunchOptions {
    readonly command: string;
    readonly args: readonly string[];
    /** Where the interpreter came from, for the log: "dice.interpreter", "Python extension" or "fallback". */
    readonly source: string;
    /** Whose dice_lsp runs: the interpreter's, or the wheel shipped in the extension. */
    readonly strategy: ImportStrategy;
}

/** Where the extension is installed and may write: what shipping the server with it needs. */
export interface ExtensionHome {
    /** The extension's folder: python/probe.py, and bundled/ with the dice-lsp wheel in a packaged extension. */
    readonly root: string;
    /** Its global storage folder, where the wheel is extracted. */
    readonly storage: string;
    /** Its version: the wheel is extracted once for each. */
    readonly version: string;
}

/** Where and with what environment the interpreter runs, for the probe, the bundle's extraction and the server. */
export interface ProcessPlace {
    readonly cwd: string | undefined;
    /** The whole environment, where it differs from the extension host's. */
    readonly env?: NodeJS.ProcessEnv;
}

/** Settings whose change restarts the server (the others are re-read by the running server). */
export const LAUNCH_SETTINGS = ["dice.interpreter", "dice.serverArgs", "dice.importStrategy", "dice.logLevel"] as const;

/** The workspace folder whose interpreter runs the server: one server serves the window. */
export function launchScope(): vscode.Uri | undefined {
    return vscode.workspace.workspaceFolders?.[0]?.uri;
}

export async function resolveLaunch(
    scope: vscode.Uri | undefined,
    environments: PythonEnvironments | undefined,
): Promise<LaunchOptions> {
    const config = vscode.workspace.getConfiguration("dice", scope);
    const serverArgs = stringArray(config.get<unknown>("serverArgs"));
    const args = ["-m", "dice_lsp", ...serverArgs, ...logLevelArgs(config.get<unknown>("logLevel"), serverArgs)];
    const strategy: ImportStrategy =
        config.get<unknown>("importStrategy") === "useBundled" ? "useBundled" : "fromEnvironment";
    const configured = config.get<string>("interpreter")?.trim() ?? "";
    if (configured !== "") {
        return { command: configured, args, source: "dice.interpreter", strategy };
    }
    // An untrusted workspace may select an interpreter inside itself (a .venv it ships); running that would run
    // the workspace's code, so only an interpreter from user settings or PATH is used until trust is granted.
    if (environments !== undefined && vscode.workspace.isTrusted) {
        const selected = await selectedInterpreter(environments, scope);
        if (selected !== undefined && selected !== "") {
            return { command: selected, args, source: "Python extension", strategy };
        }
    }
    return { command: FALLBACK_INTERPRETER, args, source: "fallback", strategy };
}

/** `--log-level LEVEL` for `dice serve`, unless dice.serverArgs names a level itself (the more specific setting). */
function logLevelArgs(level: unknown, serverArgs: readonly string[]): string[] {
    if (serverArgs.some((arg) => arg === "--log-level" || arg.startsWith("--log-level="))) {
        return [];
    }
    const known = LOG_LEVELS.find((name) => name === level) ?? "info";
    return ["--log-level", known.toUpperCase()];
}

/**
 * The folder the interpreter runs in: the workspace folder once it is trusted. `python -m` and `python -c` put their
 * folder first on sys.path, so in an untrusted workspace a `dice_lsp/` folder it ships would run in place of the
 * server; there the extension's own storage folder is used.
 */
export function processFolder(scope: vscode.Uri | undefined, home: ExtensionHome): string | undefined {
    if (!vscode.workspace.isTrusted) {
        return home.storage;
    }
    return scope?.scheme === "file" ? scope.fsPath : undefined;
}

/** `env` with `folder` first on PYTHONPATH. */
export function withPythonPath(env: NodeJS.ProcessEnv, folder: string): NodeJS.ProcessEnv {
    const rest = env.PYTHONPATH;
    return { ...env, PYTHONPATH: rest ? `${folder}${path.delimiter}${rest}` : folder };
}

export function sameLaunch(a: LaunchOptions | undefined, b: LaunchOptions | undefined): boolean {
    return (
        a !== undefined &&
        b !== undefined &&
        a.command === b.command &&
        a.strategy === b.strategy &&
        a.args.length === b.args.length &&
        a.args.every((arg, i) => arg === b.args[i])
    );
}

export function describeLaunch(launch: LaunchOptions): string {
    return [launch.command, ...launch.args].join(" ");
}

function stringArray(value: unknown): string[] {
    return Array.isArray(value) ? value.filter((item): item is string => typeof item === "string") : [];
}
