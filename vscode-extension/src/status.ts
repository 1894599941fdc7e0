/**
 * The language status item for Python files: the server's state, whether a model is loaded, and the last speedup
 * measured for the file in the active editor. Everything shown comes from the server's `dice/status` notifications.
 */

import * as vscode from "vscode";

/** States the server reports (dice_lsp/status.py's `State`). */
export type ServerState = "idle" | "loading-model" | "generating" | "checking" | "error";

/** What the item shows: a state the server reported, or one only the client can see. */
export type ShownState = ServerState | "starting" | "stopped";

/**
 * Params of the server's `dice/status` notification: dice_lsp/status.py's `Status`, field for field
 * (tests/server/test_status.py checks that they match).
 */
export interface StatusParams {
    state: ServerState;
    message?: string;
    /** The document a `speedup` belongs to. */
    uri?: string;
    /** The loaded model's name; null when none is loaded; absent when unchanged. */
    model?: string | null;
    /** The last measured speedup of `uri`; null when its last check measured none. */
    speedup?: number | null;
}

/** A status from the server, or the client's own (starting, stopped). */
export type ShownStatus = Omit<StatusParams, "state"> & { state: ShownState };

export const STATUS_NOTIFICATION = "dice/status";

const LABELS: Record<ShownState, string> = {
    starting: "starting",
    idle: "ready",
    "loading-model": "loading model",
    generating: "generating",
    checking: "checking",
    error: "error",
    stopped: "stopped",
};

const BUSY: ReadonlySet<ShownState> = new Set(["starting", "loading-model", "generating", "checking"]);

export class ServerStatus implements vscode.Disposable {
    private state: ShownState = "starting";
    private message: string | undefined;
    private model: string | null = null;
    private readonly speedups = new Map<string, number>();
    private activeUri: string | undefined;

    constructor(private readonly item: vscode.LanguageStatusItem) {
        item.name = "DICE";
        item.command = { title: "Show logs", command: "dice.showLogs" };
        this.render();
    }

    update(params: ShownStatus): void {
        this.state = params.state in LABELS ? params.state : "error";
        this.message = params.message;
        if (params.model !== undefined) {
            this.model = params.model;
        }
        if (params.uri !== undefined && params.speedup !== undefined) {
            if (params.speedup === null) {
                this.speedups.delete(params.uri);
            } else {
                this.speedups.set(params.uri, params.speedup);
            }
        }
        this.render();
    }

    /** The document in the active editor, whose speedup is shown; undefined when no editor is active. */
    setActive(uri: string | undefined): void {
        this.activeUri = uri;
        this.render();
    }

    dispose(): void {
        this.item.dispose();
    }

    private render(): void {
        const speedup = this.activeUri === undefined ? undefined : this.speedups.get(this.activeUri);
        const parts = [`DICE ${LABELS[this.state]}`];
        if (speedup !== undefined) {
            parts.push(`${speedup.toFixed(2)}×`);
        }
        this.item.text = parts.join(" · ");
        const detail = [this.model === null ? "no model loaded" : `model ${this.model}`];
        if (this.message !== undefined && this.message !== "") {
            detail.push(this.message);
        }
        this.item.detail = detail.join(" · ");
        this.item.busy = BUSY.has(this.state);
        this.item.severity =
            this.state === "error" || this.state === "stopped"
                ? vscode.LanguageStatusSeverity.Error
                : vscode.LanguageStatusSeverity.Information;
    }
}
