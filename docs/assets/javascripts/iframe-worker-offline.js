/* Web Workers for these docs opened from the file system, with no network.
 *
 * Chromium refuses to start a Worker from a file: URL, and the search of the docs runs in one.
 * Material's offline plugin would fill the gap with a script from a CDN, which an offline reader
 * cannot reach; it leaves that out when extra.polyfills already names a script whose path says
 * "iframe-worker", so this file is named so. Written for this project: the worker's script runs
 * in a hidden same-origin frame, and messages cross between the two as a Worker's would. Pages
 * served over http(s) keep the browser's own Worker.
 */
(function () {
  "use strict";
  if (location.protocol !== "file:" || typeof EventTarget !== "function") {
    return;
  }

  class FrameWorker extends EventTarget {
    constructor(url) {
      super();
      this.onmessage = null;
      this.onerror = null;
      this.pending = [];  // messages posted before the worker's script has loaded
      this.ready = false;
      this.frame = document.createElement("iframe");
      this.frame.setAttribute("aria-hidden", "true");
      this.frame.style.display = "none";
      document.documentElement.appendChild(this.frame);
      this.scope = this.frame.contentWindow;
      // the worker's postMessage() reaches this object, as a real worker's reaches its owner
      this.scope.postMessage = (data) => setTimeout(() => this.emit("message", {data: data}), 0);
      this.scope.importScripts = () => {
        throw new Error("importScripts is not available to a worker of a page read offline");
      };
      const script = this.scope.document.createElement("script");
      script.src = new URL(url, location.href).href;
      script.onload = () => {
        this.ready = true;
        this.pending.splice(0).forEach((data) => this.deliver(data));
      };
      script.onerror = () => this.emit("error", {message: "cannot load " + script.src});
      this.scope.document.head.appendChild(script);
    }

    emit(type, init) {
      const event = type === "message" ? new MessageEvent(type, init) : new ErrorEvent(type, init);
      const handler = type === "message" ? this.onmessage : this.onerror;
      if (typeof handler === "function") {
        handler.call(this, event);
      }
      this.dispatchEvent(event);
    }

    deliver(data) {
      const event = new this.scope.MessageEvent("message", {data: data});
      setTimeout(() => this.scope.dispatchEvent(event), 0);
    }

    postMessage(data) {
      if (this.ready) {
        this.deliver(data);
      } else {
        this.pending.push(data);
      }
    }

    terminate() {
      this.frame.remove();
    }
  }

  window.Worker = FrameWorker;
})();
